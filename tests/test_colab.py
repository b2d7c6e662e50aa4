"""Colab: the address in one place (pyproject.toml), the links generated from it (README.md, each student copy's
first cells), and the first cell's block, which installs only on Colab and only what the course runs on.
.ci/colab.py runs that cell in a reproduction of Colab's packages (CI)."""
import os
import subprocess
import sys
import types

import pytest

from course.runtime import versions
from course.tools import colab, nbtools

URL = "https://github.com/gpu-from-scratch/course"


def test_the_address_is_read_from_pyproject_and_a_fork_changes_one_line(tmp_path, monkeypatch):
    assert colab.repository() == URL
    assert colab.colab_link("01_data.ipynb") == (
        "https://colab.research.google.com/github/gpu-from-scratch/course/blob/main/notebooks/exercises/01_data.ipynb")
    fork = (colab.ROOT / "pyproject.toml").read_text().replace(URL, "https://github.com/someone/my-course")
    (tmp_path / "pyproject.toml").write_text(fork)
    (tmp_path / "requirements.txt").write_text((colab.ROOT / "requirements.txt").read_text())
    monkeypatch.setattr(colab, "ROOT", tmp_path)
    assert "/github/someone/my-course/blob/main/" in colab.colab_link("06_train.ipynb")
    assert 'REPO, HOME = "https://github.com/someone/my-course"' in colab.cell_block()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    with pytest.raises(ValueError, match=r"\[project.urls\]"):
        colab.repository()


def test_readme_links_every_notebook():
    assert not colab.update_readme(check=True), "run python -m course.tools.colab (README.md's Colab links)"
    readme = (colab.ROOT / "README.md").read_text()
    names = colab.notebooks()
    assert names == sorted(p.name for p in nbtools.solution_notebooks())  # every NN_*.ipynb, no list kept by hand
    for name in names:
        assert f"| {name[:-6]} | {colab.badge(name)} |" in readme


def test_each_student_copy_starts_with_its_badge_and_the_colab_block():
    for name in colab.notebooks():
        cells = nbtools.read(nbtools.EXERCISES / name)["cells"]
        md = next(nbtools.source(c) for c in cells if c["cell_type"] == "markdown")
        code = next(nbtools.source(c) for c in cells if c["cell_type"] == "code")
        assert md.startswith(colab.badge(name) + "\n\n# "), name
        assert code.startswith(colab.cell_block() + "\nimport course"), name
    nb = nbtools.read(nbtools.EXERCISES / "01_data.ipynb")
    assert nbtools.dumps(colab.add_colab(nb, "01_data.ipynb")) == nbtools.dumps(
        nbtools.read(nbtools.EXERCISES / "01_data.ipynb"))  # applied twice, it changes nothing


def test_the_cell_installs_numba_cuda_and_the_pins_and_nothing_of_jupyter():
    args = colab.install_requirements()
    assert args[0] == "numba-cuda[cu12]==0.30.4" and args[-2:] == ["-e", colab.HOME]
    for name in versions.RANGES:  # the same ranges as requirements.txt and import course (2.0 written 2)
        assert versions.requirement(name).replace(".0,", ",") in args, (name, args)
    assert not any(a.split("[")[0].split(">")[0].split("=")[0] in colab.NOT_ON_COLAB for a in args)
    assert not any("0.20.1" in a for a in args)  # the macOS build is not Colab's


def run_block(monkeypatch, on_colab, home=None, answers=None):
    """exec the block with subprocess.run, os.chdir and os.rename recorded (nothing runs); returns the calls.
    `home`: what /content/course is (None: absent, "dir": a folder, "clone": a git clone), `answers`: {a command's
    first two words: (return code, stdout, stderr)} (default: success)."""
    calls = []

    def run(cmd, **kw):
        calls.append(("run", list(cmd)))
        code, out, err = (answers or {}).get(" ".join(cmd[:2]), (0, "", ""))
        return subprocess.CompletedProcess(cmd, code, out, err)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(os, "chdir", lambda path: calls.append(("chdir", path)))
    monkeypatch.setattr(os, "rename", lambda a, b: calls.append(("rename", a, b)))
    there = {None: (), "dir": (colab.HOME,), "clone": (colab.HOME, colab.HOME + "/.git")}[home]
    monkeypatch.setattr(os.path, "isdir", lambda path: path in there and not any(c[0] == "rename" for c in calls))
    monkeypatch.setattr(os.path, "exists", lambda path: path in there and not any(c[0] == "rename" for c in calls))
    monkeypatch.setattr(sys, "path", list(sys.path))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(colab.cell_block(), {})
    return calls


def test_outside_colab_the_block_does_nothing(monkeypatch):
    assert run_block(monkeypatch, on_colab=False) == []


def test_on_colab_the_block_clones_installs_and_moves_into_the_clone(monkeypatch):
    (clone, install, chdir) = run_block(monkeypatch, on_colab=True)
    assert clone == ("run", ["git", "clone", "-q", "--depth", "1", URL, colab.HOME])
    assert install[1][:4] == [sys.executable, "-m", "pip", "install"]
    assert install[1][5:] == colab.install_requirements()
    assert chdir == ("chdir", colab.HOME + "/notebooks/exercises")


def test_a_clone_of_the_course_is_kept_and_anything_else_moved_aside_and_cloned_again(monkeypatch, capsys):
    """A regression: a /content/course that was not a clone of the course was never re-cloned, so every re-run
    failed in pip install -e."""
    ask = ["git", "-C", colab.HOME, "remote", "get-url", "origin"]
    for origin in (URL, URL + ".git"):
        calls = run_block(monkeypatch, True, "clone", {"git -C": (0, origin + "\n", "")})
        assert [c[1][:2] for c in calls if c[0] == "run"] == [ask[:2], [sys.executable, "-m"]], calls
    for home, answers in (("dir", {"git -C": (128, "", "fatal: not a git repository")}),
                          ("clone", {"git -C": (0, "https://github.com/someone/else\n", "")}),
                          ("clone", {"git -C": (2, "", "error: No such remote 'origin'")})):
        calls = run_block(monkeypatch, True, home, answers)
        moved = [c for c in calls if c[0] == "rename"]
        assert len(moved) == 1 and moved[0][1] == colab.HOME and moved[0][2].startswith(colab.HOME + "-old-"), calls
        clone = ("run", ["git", "clone", "-q", "--depth", "1", URL, colab.HOME])
        assert clone in calls and calls.index(moved[0]) < calls.index(clone), calls
        assert f"{colab.HOME} was not a clone of {URL}: moved aside, cloning the course again" in capsys.readouterr().out


@pytest.mark.parametrize("step, answer, says", [
    ("git clone", (128, "", "Cloning into '/content/course'...\nfatal: unable to access "
                            "'https://github.com/gpu-from-scratch/course/': Could not resolve host: github.com\n"),
     "Colab setup: git clone failed: fatal: unable to access 'https://github.com/gpu-from-scratch/course/': Could "
     "not resolve host: github.com"),
    ("git clone", (128, "", "fatal: '/x' does not appear to be a git repository\nfatal: Could not read from remote "
                            "repository.\n\nPlease make sure you have the correct access rights\nand the repository "
                            "exists.\n"),
     "Colab setup: git clone failed: fatal: '/x' does not appear to be a git repository"),
    (f"{sys.executable} -m", (1, "", "ERROR: No matching distribution found for numba-cuda[cu12]==0.30.4\n"),
     "Colab setup: pip install failed: ERROR: No matching distribution found for numba-cuda[cu12]==0.30.4"),
    (f"{sys.executable} -m", (1, "", ""), "Colab setup: pip install failed: exit code 1"),
], ids=["no network", "no repository", "pip", "pip without a word"])
def test_a_failed_clone_or_install_stops_in_one_line(monkeypatch, step, answer, says):
    """A regression: a failed clone was a CalledProcessError traceback."""
    with pytest.raises(SystemExit) as e:
        run_block(monkeypatch, True, answers={step: answer})
    assert str(e.value) == says
