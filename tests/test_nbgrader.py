"""The course works with nbgrader: cell metadata, generate_assignment = our student copies, autograde and feedback in
the simulator; and the student build of the package holds no solution.

The nbgrader tests run `nbgrader` (COURSE_NBGRADER, else the one on PATH) in a subprocess, with the notebooks
executed by this Python (a kernelspec written for the test): nbgrader may live in its own virtual environment.
They are skipped where nbgrader is not installed, except under CI (env CI set), where that is a failure.
Slow: ~2-3 minutes on 2 cores (four notebook runs in the simulator), all in the module fixture `graded`."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.tools import nbtools, teach

NBGRADER = os.environ.get("COURSE_NBGRADER") or shutil.which("nbgrader")
MARKER_RE = re.compile(r"^\s*#\s*[A-Z][A-Z_]+\s*$")  # `# NBVAL_CHECK_OUTPUT`, `# SHOW_SAVED`: test/tooling markers
# Wrong answers planted in bob's submission: (grade_id, solution text, replacement); None leaves the stub.
WRONG = {"ex-1-2": ("np.float32(255.0)", "np.float32(256.0)"),   # scales by 1/256
         "ex-1-3": None,                                          # not attempted
         "ex-2-1": ("range(A.shape[1])", "range(A.shape[1] - 1)")}  # drops the last k


# ---- metadata (no nbgrader needed) ----

def test_every_exercise_is_a_solution_cell_and_its_check_a_locked_test_cell():
    for path in nbtools.solution_notebooks():
        cells = nbtools.read(path)["cells"]
        marked = {i: c["metadata"]["nbgrader"] for i, c in enumerate(cells) if "nbgrader" in c.get("metadata", {})}
        solutions = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and nbtools.BEGIN in nbtools.source(c)]
        assert solutions and set(marked) == {i for s in solutions for i in (s, _next_code(cells, s))}, path.name
        for s in solutions:
            label = nbtools.EXERCISE_RE.search(nbtools.source(cells[s])).group(1)
            gid = "ex-" + label.split()[1].replace(".", "-")
            assert marked[s] == dict(grade=False, grade_id=gid, locked=False, schema_version=3, solution=True,
                                     task=False), (path.name, label)
            check = _next_code(cells, s)
            assert nbtools.source(cells[check]).lstrip().startswith("check_"), (path.name, label)
            assert marked[check] == dict(grade=True, grade_id=f"{gid}-check", locked=True, points=1,
                                         schema_version=3, solution=False, task=False), (path.name, label)


def _next_code(cells, i):
    return next(j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code")


def test_stamp_writes_metadata_only_and_check_reports_stale(tmp_path, monkeypatch):
    nb = {"cells": [
        {"cell_type": "code", "execution_count": 3, "id": "a", "metadata": {"nbgrader": {"grade_id": "old"}},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["hi\n"]}], "source": "x = 1"},
        {"cell_type": "code", "execution_count": 4, "id": "b", "metadata": {}, "outputs": [],
         "source": "# Exercise 9.1: f\ndef f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"},
        {"cell_type": "code", "execution_count": 5, "id": "c", "metadata": {"tags": ["t"]},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok\n"]}], "source": "check_f(f)"}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "09_x.ipynb"
    path.write_text(nbtools.dumps(nb))
    monkeypatch.setattr(nbtools, "solution_notebooks", lambda: [path])
    monkeypatch.setattr(nbtools, "ROOT", tmp_path)
    assert nbtools.stamp_nbgrader(check=True) == [Path("09_x.ipynb")] and path.read_text() == nbtools.dumps(nb)
    assert nbtools.stamp_nbgrader() == [Path("09_x.ipynb")] and nbtools.stamp_nbgrader(check=True) == []
    cells = nbtools.read(path)["cells"]
    assert "nbgrader" not in cells[0]["metadata"] and cells[0]["outputs"] == nb["cells"][0]["outputs"]
    assert cells[1]["metadata"]["nbgrader"]["grade_id"] == "ex-9-1" and cells[2]["metadata"]["tags"] == ["t"]
    assert cells[2]["metadata"]["nbgrader"]["points"] == 1 and cells[2]["outputs"] == nb["cells"][2]["outputs"]
    for c in cells:
        c["metadata"].pop("nbgrader", None)
    assert cells == [dict(c, metadata={k: v for k, v in c["metadata"].items() if k != "nbgrader"})
                     for c in nb["cells"]]


def test_an_exercise_without_its_check_is_refused():
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "# Exercise 9.1: f\n### BEGIN SOLUTION\n"
                     "x = 1\n### END SOLUTION"},
                    {"cell_type": "code", "metadata": {}, "source": "print(x)"}]}
    with pytest.raises(ValueError, match="must be its check"):
        nbtools.nbgrader_cells(nb, "t")


def test_config_stub_matches_ours():
    text = teach.CONFIG.read_text()
    assert nbtools.EXERCISE_RE.pattern in text and "# YOUR CODE HERE" in text


def test_nbgrader_setup_cli(tmp_path):
    from course.__main__ import main
    assert main(["nbgrader-setup", str(tmp_path / "c"), "01", "02_forward.ipynb"]) == 0
    assert (tmp_path / "c" / "nbgrader_config.py").read_text() == teach.CONFIG.read_text()
    assert sorted(p.relative_to(tmp_path / "c").as_posix() for p in (tmp_path / "c" / "source").rglob("*.ipynb")) \
        == ["source/01_data/01_data.ipynb", "source/02_forward/02_forward.ipynb"]
    assert main(["nbgrader-setup", str(tmp_path / "d"), "03", "--assignment", "ps"]) == 0
    assert (tmp_path / "d" / "source" / "ps" / "03_loss.ipynb").exists()
    assert main(["nbgrader-setup", str(tmp_path / "e"), "99"]) == 2


# ---- nbgrader itself ----

def _env(tmp):
    """nbgrader's environment: its own bin first (it runs `alembic`), and a kernel that is this Python."""
    spec = tmp / "jupyter" / "kernels" / "course-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "course (test)", "language": "python"}))
    path = os.pathsep.join([str(Path(NBGRADER).parent), os.environ.get("PATH", "")])
    pythonpath = os.pathsep.join(p for p in [str(nbtools.ROOT), os.environ.get("PYTHONPATH")] if p)
    return dict(os.environ, PATH=path, JUPYTER_PATH=str(tmp / "jupyter"), COURSE_KERNEL="course-test",
                PYTHONPATH=pythonpath)


def _nbgrader(course, env, *args, timeout=1800):
    r = subprocess.run([NBGRADER, *args], cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


def _solution_code(src):
    return "\n".join(line for line in src.splitlines() if line.strip() not in (nbtools.BEGIN, nbtools.END))


def _submit(course, student, wrong=None):
    """A submission made from the released notebooks: every stub replaced by the solution, or by a wrong answer."""
    wrong = wrong or {}
    for released in sorted((course / "release" / "ps1").glob("*.ipynb")):
        source = nbtools.read(course / "source" / "ps1" / released.name)
        solutions = {c["metadata"]["nbgrader"]["grade_id"]: _solution_code(nbtools.source(c))
                     for c in source["cells"] if c["metadata"].get("nbgrader", {}).get("solution")}
        nb = nbtools.read(released)
        for cell in nb["cells"]:
            gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if not cell["metadata"].get("nbgrader", {}).get("solution"):
                continue
            if gid in wrong and wrong[gid] is None:
                continue
            code = solutions[gid]
            if gid in wrong:
                old, new = wrong[gid]
                assert old in code, (gid, old)
                code = code.replace(old, new)
            cell["source"] = code
        out = course / "submitted" / student / "ps1" / released.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(nbtools.dumps(nb))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """An nbgrader course: every notebook released as one assignment, 01 + 02 as `ps1`, autograded for alice (the
    solutions) and bob (WRONG), and bob's feedback."""
    if not NBGRADER:
        why = "nbgrader is not installed (pip install nbgrader==0.9.6, or set COURSE_NBGRADER to its executable)"
        if os.environ.get("CI"):
            pytest.fail(why + "; CI is set, so this is a failure, not a skip", pytrace=False)
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("nbgrader")
    course, env = tmp / "course", _env(tmp)
    teach.nbgrader_setup(course, assignment="all")
    teach.nbgrader_setup(course, ["01", "02"], assignment="ps1")
    _nbgrader(course, env, "generate_assignment", "all")
    _nbgrader(course, env, "generate_assignment", "ps1")
    _submit(course, "alice")
    _submit(course, "bob", WRONG)
    _nbgrader(course, env, "autograde", "ps1", "--create")
    _nbgrader(course, env, "export", "--to", "grades.csv")
    _nbgrader(course, env, "generate_feedback", "ps1", "--student", "bob")
    return course


def _norm(src):
    """A code cell's source without directive and marker lines (what our student copies drop)."""
    keep = [line for line in src.splitlines() if not nbtools.DIRECTIVE_RE.match(line) and not MARKER_RE.match(line)]
    return "\n".join(keep).strip("\n")


def _exercises(nb):
    """[(label, stub cell, check cell)] of a student notebook, in order."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    out = []
    for i, c in enumerate(cells):
        m = nbtools.EXERCISE_RE.search(nbtools.source(c))
        if m and "NotImplementedError" in nbtools.source(c):
            out.append((m.group(1), _norm(nbtools.source(c)), _norm(nbtools.source(cells[i + 1]))))
    return out


def _without_colab(src, name):
    """A student copy's cell without what course.tools.colab puts atop the first markdown and code cells."""
    from course.tools import colab
    for added in (colab.badge(name) + "\n\n", colab.cell_block() + "\n"):
        src = src.removeprefix(added)
    return src


@pytest.mark.slow
def test_generate_assignment_gives_our_student_notebooks(graded):
    for ours in sorted(nbtools.EXERCISES.glob("*.ipynb")):
        theirs = nbtools.read(graded / "release" / "all" / ours.name)
        mine = nbtools.read(ours)
        least = 1 if ours.name >= "15" else 2                      # an appendix (from 15 on): one exercise will do
        assert _exercises(theirs) == _exercises(mine) and len(_exercises(mine)) >= least, ours.name
        assert all(not c.get("outputs") for c in theirs["cells"])
        # the rest in the same order: our copies may add cells (saved GPU outputs, use_mine) and lines to a cell
        # ... and the Colab badge and block atop the first cells (course/tools/colab.py), which nbgrader's release
        # does not need: a graded class hands its notebooks out through nbgrader, not from the repository
        pool = iter([(c["cell_type"], _norm(_without_colab(nbtools.source(c), ours.name))) for c in mine["cells"]])
        for c in theirs["cells"]:
            kind, src = c["cell_type"], _norm(nbtools.source(c))
            if src and not any(k == kind and (s == src or s.startswith(src + "\n")) for k, s in pool):
                pytest.fail(f"{ours.name}: nbgrader's cell {c.get('id')} is not in our student copy, in order:\n{src}")


def _scores(course):
    with open(course / "grades.csv") as f:
        return {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)}


def _errors(course, student, name):
    """{grade_id of a test cell: (ename, evalue)} of the cells that raised in the autograded notebook."""
    nb = nbtools.read(course / "autograded" / student / "ps1" / name)
    return {c["metadata"]["nbgrader"]["grade_id"]: (o["ename"], o["evalue"])
            for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
            for o in c.get("outputs", []) if o["output_type"] == "error"}


@pytest.mark.slow
def test_autograde_full_points_for_the_solutions(graded):
    assert _scores(graded)[("alice", "ps1")] == (6.0, 6.0)
    assert _errors(graded, "alice", "01_data.ipynb") == {} and _errors(graded, "alice", "02_forward.ipynb") == {}


@pytest.mark.slow
def test_autograde_partial_score_for_wrong_answers(graded):
    assert _scores(graded)[("bob", "ps1")] == (3.0, 6.0)
    errors = {**_errors(graded, "bob", "01_data.ipynb"), **_errors(graded, "bob", "02_forward.ipynb")}
    assert set(errors) == {"ex-1-2-check", "ex-1-3-check", "ex-2-1-check"}
    assert errors["ex-1-2-check"][0] == "CheckFailure" and "Exercise 1.2 failed" in errors["ex-1-2-check"][1]
    assert errors["ex-2-1-check"][0] == "CheckFailure" and "Exercise 2.1 failed" in errors["ex-2-1-check"][1]
    assert errors["ex-1-3-check"][0] == "NotImplementedError" and "Exercise 1.3" in errors["ex-1-3-check"][1]  # the stub


@pytest.mark.slow
def test_feedback_shows_the_checks_message(graded):
    html = (graded / "feedback" / "bob" / "ps1" / "02_forward.html").read_text()
    assert "CheckFailure" in html and "Exercise 2.1 failed" in html and "Hint" in html


@pytest.mark.slow
def test_feedback_does_not_show_the_solution(graded):
    """With two-level hints a failure names what is wrong without the solution's code, and the
    traceback stops at the check's message: the feedback a student gets holds no solution code."""
    from course.checks import core
    if not hasattr(core, "HINTS"):
        pytest.skip("two-level hints (course.checks.core.HINTS, hint('N.M')) are not in this checkout")
    nb = nbtools.read(graded / "autograded" / "bob" / "ps1" / "02_forward.ipynb")
    shown = [json.dumps(o) for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex-2-1-check"
             for o in c["outputs"]]  # what the feedback renders for the check cell
    assert shown and "Exercise 2.1 failed" in shown[-1]
    assert not any("acc += A[row, k] * B[k, col]" in o for o in shown)


# ---- the student build (no nbgrader needed) ----

@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return teach.student_build(tmp_path_factory.mktemp("student") / "course-student")


def _solution_blocks():
    """(notebook, label, dedented solution block) of every exercise."""
    for path in nbtools.solution_notebooks():
        for c in nbtools.read(path)["cells"]:
            src = nbtools.source(c)
            if c["cell_type"] == "code" and nbtools.BEGIN in src:
                block = src.split(nbtools.BEGIN, 1)[1].split(nbtools.END, 1)[0]
                block = textwrap.dedent(block.split("\n", 1)[1].rsplit("\n", 1)[0])
                yield path.name, nbtools.EXERCISE_RE.search(src).group(1), block


def _squash(text):
    return re.sub(r"\s+", " ", text)


def test_student_build_holds_no_solution(build):
    """No solution block in the build's package or notebooks. course/checks/ is left out: its code-level hints
    (hint("N.M")) are for students who ask, and one of them (10.1's) spells out the two-line answer."""
    built = _squash("\n".join(p.read_text() for p in build.rglob("*.py") if "checks" not in p.parts))
    built_nbs = _squash("\n".join(p.read_text() for p in build.rglob("*.ipynb")))
    reference = _squash("\n".join(p.read_text() for p in nbtools.PACKAGE.glob("*.py")))
    exported = 0
    for name, label, block in _solution_blocks():
        b = _squash(block).strip()
        assert b not in built and b not in built_nbs, f"{label} ({name}): its solution is in the student build"
        exported += b in reference
        if b in reference:
            assert label in built, f"{label}: no stub naming it in the student build"
    assert exported >= 15  # the reference package does hold them: the test looks in the right place


def test_student_build_stubs_raise_until_replaced(build):
    """In the build: a stub kernel's launcher raises NotImplementedError naming the exercise (in Python, so on a GPU
    too), other code runs, and a kernel that calls a stub device function runs once that function is replaced."""
    nb02 = nbtools.read(nbtools.NOTEBOOKS / "02_forward.ipynb")
    tile_cell = next(_solution_code(nbtools.source(c)) for c in nb02["cells"]
                     if "def tile_dot" in nbtools.source(c) and nbtools.BEGIN in nbtools.source(c))
    script = textwrap.dedent('''
        import sys
        import numpy as np
        import course
        from numba import cuda
        import course.data, course.forward, course.gather, course.scale
        assert course.__file__.startswith(sys.argv[1]), course.__file__
        def raises(fn, label):
            try:
                fn()
            except NotImplementedError as e:
                assert label in str(e), str(e)
            else:
                raise AssertionError(f"{label}: no NotImplementedError")
        raises(lambda: course.data.load_mnist(), "Exercise 1.1")
        raises(lambda: course.scale.scale(cuda.to_device(np.zeros(5, np.uint8))), "Exercise 1.2")
        A = np.random.default_rng(0).random((5, 7), dtype=np.float32)
        B = np.random.default_rng(1).random((7, 3), dtype=np.float32)
        C = cuda.device_array((5, 3), np.float32)
        v2 = lambda: course.forward.matmul_v2_kernel[(1, 1), (16, 16)](cuda.to_device(A), cuda.to_device(B), C)
        raises(v2, "Exercise 2.2")
        y = course.gather.gather_labels(cuda.to_device(np.arange(9, dtype=np.int64)), cuda.to_device(np.array([4, 2])))
        assert list(y.copy_to_host()) == [4, 2]  # not an exercise: runs
        g = dict(vars(course.forward))
        exec(sys.stdin.read(), g)  # the student's tile_dot, put in place as course.use_mine() does
        course.forward.tile_dot = g["tile_dot"]
        v2()
        assert np.allclose(C.copy_to_host(), A @ B, atol=1e-5)
        print("ok")
    ''')
    env = dict(os.environ, PYTHONPATH=str(build), COURSE_DEVICE="sim")
    r = subprocess.run([sys.executable, "-c", script, str(build)], input=tile_cell, env=env, cwd=build,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_student_build_notebooks_switch_on_use_mine(build):
    """With course/runtime/mine.py every student notebook from 02 on calls course.use_mine() in its first cell
    (02 loads MNIST with 1.1's parser); without it the build adds no such call."""
    for path in sorted((build / "notebooks" / "exercises").glob("*.ipynb")):
        ours = nbtools.read(nbtools.EXERCISES / path.name)
        first = next(nbtools.source(c) for c in nbtools.read(path)["cells"] if c["cell_type"] == "code")
        if (nbtools.PACKAGE / "runtime" / "mine.py").exists() and path.name[:2] >= "02":
            assert "course.use_mine()" in first, path.name
        else:
            assert nbtools.read(path) == ours, path.name
    nb = {"cells": [{"cell_type": "markdown", "source": "x"}, {"cell_type": "code", "source": "import course\n"}]}
    assert teach.with_use_mine(nb)["cells"][1]["source"] == "import course\n" + teach.USE_MINE
    assert teach.with_use_mine(nb)["cells"][1]["source"].count("use_mine(") == 1
    commented = {"cells": [{"cell_type": "code", "source": "import course\nx = 1  # where course.use_mine() found it\n"}]}
    assert teach.with_use_mine(commented)["cells"][0]["source"].endswith(teach.USE_MINE)   # a comment is no call


def test_student_build_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        teach.student_build(tmp_path)
