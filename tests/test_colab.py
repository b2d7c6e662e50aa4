"""Colab: the address in one place (pyproject.toml), the links generated from it (README.md, each student copy's
first cells), and the first cell's block, which installs only on Colab and only what the course runs on.
.ci/colab.py runs that cell in a reproduction of Colab's packages (CI)."""
import os
import subprocess
import sys
import types

import pytest

from course import versions
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


def run_block(monkeypatch, on_colab):
    """exec the block with subprocess.run and os.chdir recorded (nothing runs); returns the calls."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(("run", cmd)))
    monkeypatch.setattr(os, "chdir", lambda path: calls.append(("chdir", path)))
    monkeypatch.setattr(os.path, "isdir", lambda path: False)
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
