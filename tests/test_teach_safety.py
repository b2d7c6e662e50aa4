"""The teachers' commands under realistic misuse: nothing of the teacher's is
overwritten, no solution ships in a student build, nothing is written outside DIR, errors are one line, exit 2."""
import shutil

import pytest

from course import __main__ as cli
from course.tools import nbtools, teach


def setup(*argv):
    return cli.main(["nbgrader-setup", *map(str, argv)])


def one_line_error(capsys, cmd):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m course {cmd}: error: "), err
    return err


def test_setup_keeps_the_teacher_s_config_and_refuses_an_edited_notebook(tmp_path, capsys):
    d = tmp_path / "class"
    assert setup(d, "01") == 0
    config, nb = d / "nbgrader_config.py", d / "source" / "01_data" / "01_data.ipynb"
    config.write_text(config.read_text() + "c.Exchange.root = '/srv/exchange'\n")  # the teacher's own settings
    nb.write_text(nb.read_text().replace("IDX", "IDX (edited for my class)", 1))
    mine = {p: p.read_bytes() for p in (config, nb)}
    capsys.readouterr()
    assert setup(d, "01") == 2  # the edited notebook: refused, nothing written
    assert "differ from the course's notebooks" in one_line_error(capsys, "nbgrader-setup")
    assert {p: p.read_bytes() for p in (config, nb)} == mine
    assert setup(d, "02") == 0  # adding a notebook later: the config and 01 stay the teacher's
    out = capsys.readouterr().out
    assert f"kept your {config}" in out and {p: p.read_bytes() for p in (config, nb)} == mine
    assert setup(d, "01", "--force") == 0  # asked for: the notebook is replaced, the config still kept
    assert nb.read_bytes() == (nbtools.NOTEBOOKS / "01_data.ipynb").read_bytes() and config.read_bytes() == mine[config]


BAD_DIRS = {  # case -> (the DIR argument relative to tmp_path or absolute, the error's words)
    "a file": ("afile", "is a file, not a directory"),
    "inside the student notebooks": (str(nbtools.EXERCISES / "build-here"), "is inside the course's notebooks/"),
    "inside the package": (str(nbtools.PACKAGE / "build-here"), "is inside the course's course/"),
}


@pytest.mark.parametrize("cmd", ["nbgrader-setup", "student-build"])
@pytest.mark.parametrize("case", sorted(BAD_DIRS))
def test_a_dir_that_cannot_be_used_is_one_line(cmd, case, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    arg, words = BAD_DIRS[case]
    assert cli.main([cmd, str(tmp_path / arg)]) == 2
    assert words in one_line_error(capsys, cmd)
    assert not (nbtools.EXERCISES / "build-here").exists() and not (nbtools.PACKAGE / "build-here").exists()


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs-escaped", "..", "a/b"])
def test_an_assignment_is_a_folder_name_not_a_path(name, tmp_path, capsys):
    assert setup(tmp_path / "c", "01", "--assignment", name) == 2
    assert "a folder name" in one_line_error(capsys, "nbgrader-setup")
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.rglob("*.ipynb"))


def test_options_and_notebooks_in_any_order(tmp_path):
    assert setup(tmp_path / "c", "--assignment", "ps1", "01", "02") == 0
    assert sorted(p.name for p in (tmp_path / "c" / "source" / "ps1").glob("*.ipynb")) == ["01_data.ipynb",
                                                                                         "02_forward.ipynb"]


def test_student_build_makes_the_notebooks_from_the_solutions(tmp_path, monkeypatch):
    """Solutions pasted into the student copy and a JupyterLab duplicate beside it stay out of the build."""
    work = tmp_path / "exercises"
    work.mkdir()
    shutil.copyfile(nbtools.NOTEBOOKS / "01_data.ipynb", work / "01_data.ipynb")  # every solution pasted in
    shutil.copyfile(nbtools.NOTEBOOKS / "02_forward.ipynb", work / "02_forward-Copy1.ipynb")
    monkeypatch.setattr(nbtools, "EXERCISES", work)
    build = teach.student_build(tmp_path / "build")
    built = sorted(p.name for p in (build / "notebooks" / "exercises").iterdir())
    assert built == [p.name for p in nbtools.solution_notebooks()]
    for path in (build / "notebooks" / "exercises").iterdir():
        assert nbtools.BEGIN not in path.read_text() and "### END SOLUTION" not in path.read_text(), path.name
    first = nbtools.read(build / "notebooks" / "exercises" / "01_data.ipynb")
    assert nbtools.cells_sha(first) == nbtools.cells_sha(nbtools.student_copy(nbtools.NOTEBOOKS / "01_data.ipynb"))


@pytest.mark.parametrize("cmd", ["nbgrader-setup", "student-build"])
def test_no_directory_is_one_line(cmd, capsys):
    assert cli.main([cmd]) == 2
    assert "give the directory DIR" in one_line_error(capsys, cmd)
