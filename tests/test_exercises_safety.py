"""`python -m course exercises` and `export` in a student's folder:
a student's edits are never overwritten, a notebook it did not write is never deleted, errors are one line."""
import json
import shutil

import pytest

from course import __main__ as cli
from course.tools import nbtools

NAME = "01_data.ipynb"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A course checkout in tmp_path with one solution notebook (01) and its student copy written."""
    (tmp_path / "notebooks" / "exercises").mkdir(parents=True)
    shutil.copyfile(nbtools.NOTEBOOKS / NAME, tmp_path / "notebooks" / NAME)
    monkeypatch.setattr(nbtools, "ROOT", tmp_path)
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(nbtools, "EXERCISES", tmp_path / "notebooks" / "exercises")
    assert nbtools.make_exercises() == [nbtools.EXERCISES.relative_to(tmp_path) / NAME]
    return tmp_path


def edit(path, what="def parse_idx_header(buf):\n    return 'my work'\n"):
    """A student's edit: the first exercise cell's stub replaced, saved as Jupyter would."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if nbtools.YOUR_CODE in nbtools.source(c))
    cell["source"] = nbtools.source(cell).replace(nbtools.YOUR_CODE, what)
    path.write_text(json.dumps(nb, indent=1))


def run(*argv):
    """`python -m course ARGV` in this process: its exit code."""
    return cli.main(list(argv))


def test_an_edited_copy_is_refused_and_a_duplicate_left_alone(repo, capsys):
    mine, dup = nbtools.EXERCISES / NAME, nbtools.EXERCISES / "01_data-Copy1.ipynb"
    shutil.copyfile(mine, dup)  # JupyterLab's File > Duplicate
    edit(mine)
    before = {p: p.read_bytes() for p in (mine, dup)}
    assert run("exercises") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "01_data.ipynb in notebooks/exercises differ from what" in err
    assert "01_data-Copy1" not in err
    assert {p: p.read_bytes() for p in (mine, dup)} == before  # nothing written, nothing deleted


def test_force_keeps_the_edited_copy_in_a_backup_folder(repo, capsys):
    mine = nbtools.EXERCISES / NAME
    edit(mine)
    edited = mine.read_bytes()
    assert run("exercises", "--force") == 0
    out = capsys.readouterr().out
    backups = list(nbtools.EXERCISES.glob("backup-*/" + NAME))
    assert len(backups) == 1 and backups[0].read_bytes() == edited
    assert f"kept notebooks/exercises/{NAME} as notebooks/exercises/{backups[0].parent.name}/{NAME}" in out
    assert nbtools.as_written(mine) and nbtools.make_exercises(check=True) == []


def test_a_copy_only_run_is_rewritten_and_only_its_own_stale_copies_are_deleted(repo, capsys):
    mine = nbtools.EXERCISES / NAME
    nb = json.loads(mine.read_text())
    nb["cells"][0]["outputs"] = [dict(output_type="stream", name="stdout", text="ran\n")]  # run, not edited
    mine.write_text(json.dumps(nb))
    gone = nbtools.EXERCISES / "09_gone.ipynb"  # a copy it wrote of a notebook since removed
    written = nbtools.stamp_written(nbtools.student_copy(nbtools.NOTEBOOKS / NAME), gone.name)
    gone.write_text(nbtools.notebook_text(written))
    own = nbtools.EXERCISES / "my_notes.ipynb"  # the student's own notebook
    own.write_text(json.dumps(dict(cells=[], metadata={}, nbformat=4, nbformat_minor=5)))
    shutil.copyfile(gone, nbtools.EXERCISES / "09_gone-Copy1.ipynb")
    assert run("exercises") == 0
    assert not gone.exists() and own.exists() and (nbtools.EXERCISES / "09_gone-Copy1.ipynb").exists()
    assert nbtools.make_exercises(check=True) == []


@pytest.mark.parametrize("cmd", ["export", "exercises"])
def test_a_notebook_that_is_not_json_is_named_in_one_line(cmd, repo, capsys):
    (nbtools.NOTEBOOKS / NAME).write_text('{"cells": [')
    assert run(cmd, "--check") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{nbtools.NOTEBOOKS / NAME}: not a notebook (not JSON" in err


def test_cells_without_ids_get_stable_ones(repo):
    path = nbtools.NOTEBOOKS / NAME
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        cell.pop("id")
    nb["nbformat_minor"] = 5  # ids required: nbformat would make up random ones
    path.write_text(json.dumps(nb))
    nbtools.make_exercises(force=True)
    assert nbtools.make_exercises(check=True) == []  # the ids are not random


def test_two_cells_of_one_exercise_are_refused():
    nb = nbtools.read(nbtools.NOTEBOOKS / NAME)
    i = next(i for i, c in enumerate(nb["cells"]) if nbtools.BEGIN in nbtools.source(c))
    nb["cells"] += [nb["cells"][i], nb["cells"][i + 1]]
    with pytest.raises(ValueError, match=r"are both `# Exercise 1.1`: give each exercise its own number"):
        nbtools.nbgrader_cells(nb, NAME)


def test_no_solution_notebooks_deletes_nothing(repo, capsys):
    (nbtools.NOTEBOOKS / NAME).unlink()  # a student build has only notebooks/exercises/
    assert run("exercises") == 2
    assert "no solution notebooks" in capsys.readouterr().err and (nbtools.EXERCISES / NAME).exists()


def test_a_copy_as_committed_counts_as_written(tmp_path):
    """A copy without the stamp (written before it existed, or merged) may be replaced only if git has it as is."""
    if not (nbtools.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert nbtools.committed(nbtools.EXERCISES / NAME)  # CI's `exercises --check` keeps it as generated
    loose = tmp_path / NAME
    shutil.copyfile(nbtools.EXERCISES / NAME, loose)
    assert not nbtools.committed(loose)
