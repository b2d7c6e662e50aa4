"""course.runtime.mine under hostile but realistic use: a pass always stands, what cannot be
saved faithfully is not saved (one line says why), a malformed or tampered record is the course's with the reason,
and a notebook's folder holds its own solutions, never a classmate's."""
import ast
import errno
import functools
import json
import os
import sys
import types

import pytest

from course.runtime import mine, solutions
from course.checks import core
from course.checks.data import check_scale_kernel
from course.tools import nbtools
from simulated_student import run_cell

SCALE_CELL = '''import numpy as np
from numba import cuda


# Exercise 1.2: scale uint8 pixels to float32 in [0, 1]
@cuda.jit
def scale_kernel(x, out):
    """One thread per element: out[i] = x[i] / 255."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] / np.float32(255.0)
'''


def passed_scale(cell=SCALE_CELL, name="<01 cell 3>"):
    """A student's 1.2 typed into a notebook cell and checked: its namespace."""
    ns = {"__name__": "__main__"}
    run_cell(ns, cell, name)
    check_scale_kernel(ns["scale_kernel"])
    return ns


def whose(key):
    return mine.status([key])[key][1]


@pytest.fixture
def saved(tmp_path, monkeypatch):
    """COURSE_MINE_DIR with a passing 1.2 in it."""
    d = tmp_path / "mine"
    monkeypatch.setenv("COURSE_MINE_DIR", str(d))
    passed_scale()
    assert whose("1.2") == "yours"
    yield d
    mine.use_course()


def test_the_checks_save_a_pass_through_solutions_which_import_no_check():
    for module in (solutions, mine):
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not [m for m in imported if m.startswith(("course.checks", "course.tools"))], imported  # nor lazily
    assert core.solutions is solutions and solutions.EXERCISES == nbtools.EXERCISES


def test_a_failed_save_leaves_the_pass_standing(monkeypatch, capsys):
    def broken(exercise, fn, check=None):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(solutions, "record", broken)
    core.passed("Exercise 1.2", None, "3 cases", check="check_scale_kernel")
    out = capsys.readouterr().out.splitlines()
    assert out == ["✓ Exercise 1.2 passed: 3 cases", "  (not saved: OSError: [Errno 28] No space left on device)"]


def test_the_record_names_its_check(saved):
    assert json.loads((saved / "ex_1_2.json").read_text())["check"] == "check_scale_kernel"


@pytest.mark.parametrize("where", ["a file", "full disk"])
def test_a_mine_folder_that_cannot_be_written_is_one_line_and_the_pass_stands(where, tmp_path, monkeypatch, capsys):
    d = tmp_path / "mine"
    if where == "a file":
        d.write_text("not a folder")
    else:
        def full(src, dst):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(solutions.os, "replace", full)
    monkeypatch.setenv("COURSE_MINE_DIR", str(d))
    passed_scale()  # no exception: the check passed
    out = capsys.readouterr().out
    assert "✓ Exercise 1.2 passed" in out
    line = next(l for l in out.splitlines() if "not saved" in l)
    assert line.startswith(f"  (not saved for course.use_mine(): cannot write to {d}: ")
    assert not list(tmp_path.rglob("*.tmp"))  # ENOSPC leaves no half-written file


UNSAVEABLE = {  # cell -> (name of the solution, the reason printed)
    "lambda": ("import numpy as np\n# Exercise 1.1: parse an IDX header\n"
               "def _parse(buf):\n    return buf\nparse_idx_header = lambda buf: _parse(buf)\n",
               "parse_idx_header", "it is a lambda"),
    "closure": ("import numpy as np\nfrom numba import cuda\n\n\n# Exercise 1.2: scale\ndef make(D):\n"
                "    @cuda.jit\n    def scale_kernel(x, out):\n        i = cuda.grid(1)\n"
                "        if i < out.size:\n            out[i] = x[i] / D\n    return scale_kernel\n\n\n"
                "scale_kernel = make(np.float32(255))\n", "scale_kernel", "it is a closure: it uses `D`"),
}


@pytest.mark.parametrize("case", sorted(UNSAVEABLE))
def test_what_cannot_be_saved_faithfully_is_refused_in_one_line(case, tmp_path, monkeypatch, capsys):
    cell, name, reason = UNSAVEABLE[case]
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    ns = {"__name__": "__main__"}
    run_cell(ns, cell, f"<{case} cell>")
    assert solutions.record("1.1" if case == "lambda" else "1.2", ns[name]) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"  (not saved for course.use_mine(): {reason}")
    assert not (tmp_path / "mine").exists()


def test_a_partial_is_not_saved_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    ns = {"__name__": "__main__"}
    run_cell(ns, "def _parse(buf, n):\n    return buf\n", "<cell>")
    assert solutions.record("1.1", functools.partial(ns["_parse"], n=3)) is None
    assert capsys.readouterr().out == ("  (not saved for course.use_mine(): it is a partial, not a function: "
                                       "write it as a `def`)\n")


def test_two_values_of_one_name_are_refused_not_the_last_one_kept(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    a, b = {"__name__": "__main__"}, {"__name__": "__main__"}
    run_cell(a, "K = 1\ndef helper(x):\n    return x + K\n", "<cell a>")
    run_cell(b, "K = 2\n# Exercise 1.1: parse\ndef parse_idx_header(buf):\n    return helper(buf) * K\n",
                  "<cell b>")
    b["helper"] = a["helper"]
    assert b["parse_idx_header"](5) == 12  # what passed in the notebook
    assert solutions.record("1.1", b["parse_idx_header"]) is None
    assert "two functions it uses see different `K` (K = 2 and K = 1)" in capsys.readouterr().out


def _rewrite(d, key, text=None, **fields):
    """Change a saved solution (and its hash, as a classmate's copy would) or fields of its record."""
    stem = "ex_" + key.replace(".", "_")
    rec = json.loads((d / f"{stem}.json").read_text())
    if text is not None:
        (d / f"{stem}.py").write_text(text, encoding="utf-8")
        rec["sha256"] = mine._sha(text)
    for k, v in fields.items():
        if v is None:
            rec.pop(k, None)
        else:
            rec[k] = v
    (d / f"{stem}.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("status", [None, "bogus", "failed", "edited"])
def test_only_a_record_that_says_passed_counts(status, saved):
    _rewrite(saved, "1.2", status=status)
    assert whose("1.2") != "yours"
    assert whose("1.2") == {None: "its record says 'None', not passed", "bogus": "its record says 'bogus', not passed",
                            "failed": "check failed", "edited": "edited after passing"}[status]


IMPORT_TIME = {  # appended to the saved file, hash rewritten: refused before it runs ({n}: its first line after)
    "print": ("print('pwned')\n", "line {n} is not what course.runtime.solutions saves (a Expr)"),
    "exit": ("import sys\nsys.exit(0)\n", "line {n1} is not what course.runtime.solutions saves (a Expr)"),
    "loop": ("while True:\n    pass\n", "line {n} is not what course.runtime.solutions saves (a While)"),
    "attribute set": ("import os\nos.environ = 1\n", "line {n1} is not what course.runtime.solutions saves (a Assign)"),
    "call assigned": ("import os\nX = os.system('true')\n", "line {n1} is not what course.runtime.solutions saves (a Assign)"),
    "decorator that exits": ("import sys\n@sys.exit\ndef f():\n    pass\n",
                             "line {n2} (f): its decorator `sys.exit` is not numba's jit with constant arguments"),
    # a regression: a def's defaults, annotations and decorators ran at use_mine() (a hang, say)
    "default that sleeps": ("import time\ndef f(x=time.sleep(0)):\n    pass\n",
                            "line {n1} (f): `time.sleep(0)` (a default value or an annotation) is not a name"),
    "keyword default": ("def f(*, x=print('pwned')):\n    pass\n", "line {n} (f): `print('pwned')` (a default"),
    "annotation": ("def f(x: input()):\n    pass\n", "line {n} (f): `input()` (a default value or an annotation)"),
    "return annotation": ("def f() -> exit():\n    pass\n", "line {n} (f): `exit()` (a default value"),
    "jit with a call": ("from numba import cuda\nimport time\n@cuda.jit(device=time.sleep(0))\ndef f():\n    pass\n",
                        "line {n3} (f): its decorator `cuda.jit(device=time.sleep(0))` is not numba's jit"),
    "jit by another name": ("from time import sleep as jit\n@jit(0)\ndef f():\n    pass\n",
                            "line {n2} (f): its decorator `jit(0)` is not numba's jit"),
}


@pytest.mark.parametrize("case", sorted(IMPORT_TIME))
def test_code_run_at_import_is_the_course_s_with_the_reason(case, saved, capsys):
    text = (saved / "ex_1_2.py").read_text()
    extra, reason = IMPORT_TIME[case]
    n = text.count("\n") + 1
    reason = reason.format(n=n, n1=n + 1, n2=n + 2, n3=n + 3)
    _rewrite(saved, "1.2", text + extra)
    why = whose("1.2")  # returns: no exit, no hang
    assert why.startswith("cannot load: ") and reason in why, why


MALFORMED = {  # the record's JSON text -> the reason's start
    "a list": ("[]", "cannot read ex_1_2.json: a JSON list, not a record"),
    "functions a list": (None, "cannot read ex_1_2.json: `functions` is a list"),
    "time a string": (None, "cannot read ex_1_2.json: `time` is a str"),
    "deep": ("[" * 200000, "cannot read ex_1_2.json: "),
    "not JSON": ("{", "cannot read ex_1_2.json: Expecting property name"),
    "no sha256": (None, "cannot read ex_1_2.json: a passed record without `sha256`"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_record_is_one_line_then_the_course_s_kernel(case, saved, capsys):
    text, reason = MALFORMED[case]
    if text is None:
        rec = json.loads((saved / "ex_1_2.json").read_text())
        rec.update({"functions a list": dict(functions=[]), "time a string": dict(time="yesterday")}.get(case, {}))
        rec.pop("sha256") if case == "no sha256" else None
        text = json.dumps(rec)
    (saved / "ex_1_2.json").write_text(text)
    capsys.readouterr()
    st = mine.use_mine(["1.2"])  # no traceback
    assert st["1.2"][0] is None and st["1.2"][1].startswith(reason), st["1.2"]
    row = next(l for l in capsys.readouterr().out.splitlines() if l.strip().startswith("1.2"))
    assert "course's: cannot read ex_1_2.json" in row
    solutions._after_cell(types.SimpleNamespace(info=types.SimpleNamespace(raw_cell=SCALE_CELL), error_in_exec=None))


def test_plain_defaults_and_numba_s_jit_still_load(saved):
    """What the course's solutions hold: @cuda.jit, @cuda.jit(device=True), names, constants, math.inf."""
    text = (saved / "ex_1_2.py").read_text()
    _rewrite(saved, "1.2", text + "import math\nfrom numba import cuda as cu\nK = 3\n\n\n@cu.jit(device=True, "
                                  "inline=True)\ndef g(x, k=K, lo=-1.5, hi=math.inf, mode='sgd', shape=(1, 2), n: int = 0):"
                                  "\n    return x\n")
    assert whose("1.2") == "yours"


def test_a_solution_whose_def_would_run_code_is_not_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    cell = SCALE_CELL.replace("def scale_kernel(x, out):", "def scale_kernel(x, out, k=np.float32(255)):")
    passed_scale(cell)
    out = capsys.readouterr().out
    assert "(not saved for course.use_mine(): ex_1_2.py line" in out and "`np.float32(255)`" in out, out
    assert not (tmp_path / "mine" / "ex_1_2.py").exists()


def test_a_planted_link_is_never_written_through(tmp_path, monkeypatch, capsys):
    """A regression: the temporary file's name was predictable (ex_1_2.py.PID.tmp): a link planted there made a
    passing check overwrite the file it named. Now the name is new each time and a link at the target is refused."""
    d = tmp_path / "mine"
    d.mkdir()
    monkeypatch.setenv("COURSE_MINE_DIR", str(d))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in ("ex_1_2.py", "ex_1_2.json", "__init__.py"):
        os.symlink(victim, d / f"{name}.{os.getpid()}.tmp")  # the old temporary names
    passed_scale()
    assert victim.read_text() == "precious\n" and whose("1.2") == "yours"
    for name in ("ex_1_2.py", "ex_1_2.json"):
        (d / name).unlink()
    os.symlink(victim, d / "ex_1_2.py")  # the target itself a link
    capsys.readouterr()
    passed_scale()
    out = capsys.readouterr().out
    assert victim.read_text() == "precious\n" and (d / "ex_1_2.py").is_symlink()
    assert "(not saved for course.use_mine(): cannot write to" in out and "ex_1_2.py is a symbolic link" in out, out
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


def test_a_sibling_notebook_whose_cell_source_is_not_text_is_skipped_with_a_note(saved, capsys):
    """A regression: a cell `source` that is a number made use_mine() and train --mine fail with a TypeError."""
    rec = json.loads((saved / "ex_1_2.json").read_text())
    nb = saved.parent / "01_data.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": 5},
                                        {"cell_type": "code", "source": ["x", 1]},
                                        {"cell_type": "code", "source": SCALE_CELL}]}))
    os.utime(nb, (rec["time"] + 5, rec["time"] + 5))
    capsys.readouterr()
    st = mine.use_mine(["1.2"])
    out = capsys.readouterr().out.splitlines()
    assert st["1.2"][1] == "yours"
    assert "course.runtime.mine: 01_data.ipynb cell 0: its source is a int, not text: skipped when looking for edits" in out
    assert "course.runtime.mine: 01_data.ipynb cell 1: its source is a list, not text: skipped when looking for edits" in out


def test_cyclic_dependencies_and_a_sibling_notebook_that_is_not_one(saved):
    for key, dep in (("2.2", "2.3"), ("2.3", "2.2")):
        rec = dict(exercise=key, name="f", status="passed", time=0.0, sha256="0" * 64, check=None, cell=None,
                   functions={"g": dict(sha256="1" * 64, exercise=dep)})
        (saved / f"ex_{key.replace('.', '_')}.json").write_text(json.dumps(rec))
    (saved.parent / "01_data.ipynb").write_text("[]")  # a sibling "notebook" of the record's exercise
    assert whose("1.2") == "yours"
    assert "which uses this one back" in whose("2.3")


def test_a_notebook_keeps_its_solutions_in_its_own_folder(tmp_path, monkeypatch, capsys):
    """Item 4: alice's notebook run by the teacher saves into alice's folder; bob's run in his uses nothing of hers."""
    monkeypatch.delenv("COURSE_MINE_DIR", raising=False)
    monkeypatch.setattr(solutions, "in_notebook", lambda: True)
    for student in ("alice", "bob"):
        (tmp_path / student).mkdir()
    monkeypatch.chdir(tmp_path / "alice")
    passed_scale()
    assert (tmp_path / "alice" / "mine" / "ex_1_2.py").is_file() and whose("1.2") == "yours"
    monkeypatch.chdir(tmp_path / "bob")
    assert whose("1.2") == "never checked"
    assert not (nbtools.EXERCISES / "mine" / "ex_1_2.json").exists() or \
        "alice" not in (nbtools.EXERCISES / "mine" / "ex_1_2.json").read_text()


def test_the_shipped_nbgrader_config_switches_saving_and_using_off(monkeypatch):
    """Item 4: nbgrader loads the config before it starts a kernel, which inherits COURSE_MINE_DIR=off."""
    for name in ("nbgrader", "nbgrader.converters", "nbgrader.preprocessors"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))

    class ClearSolutions:
        pass

    class Preprocessors:
        def default(self):
            return [ClearSolutions]

    sys.modules["nbgrader.preprocessors"].ClearSolutions = ClearSolutions
    sys.modules["nbgrader.converters"].GenerateAssignment = types.SimpleNamespace(
        class_traits=lambda: {"preprocessors": Preprocessors()})
    monkeypatch.setenv("COURSE_MINE_DIR", "/somewhere/mine")
    config = types.SimpleNamespace(Execute=types.SimpleNamespace(), GenerateAssignment=types.SimpleNamespace())
    path = nbtools.ROOT / "teachers" / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: config})
    assert os.environ["COURSE_MINE_DIR"] == "off" and mine.disabled()


def test_an_edit_saved_in_the_notebook_counts_with_the_mine_folder_elsewhere(tmp_path, monkeypatch):
    """The folder the notebook ran in is recorded: a later save there with another cell counts as an edit, wherever
    COURSE_MINE_DIR puts the solutions (also nbgrader's release folders)."""
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "elsewhere" / "mine"))
    monkeypatch.setattr(solutions, "in_notebook", lambda: True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    passed_scale()
    assert whose("1.2") == "yours"
    edited = SCALE_CELL.replace("np.float32(255.0)", "np.float32(256.0)")
    nb = dict(cells=[dict(cell_type="code", source=edited, metadata={}, outputs=[], execution_count=None)],
              metadata={}, nbformat=4, nbformat_minor=4)
    (tmp_path / "work" / "01_data.ipynb").write_text(json.dumps(nb))
    rec = json.loads((tmp_path / "elsewhere" / "mine" / "ex_1_2.json").read_text())
    os.utime(tmp_path / "work" / "01_data.ipynb", (rec["time"] + 5, rec["time"] + 5))
    assert whose("1.2") == "edited after passing"


def test_in_notebook_is_true_only_in_a_jupyter_kernel_shell(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    assert not solutions.in_notebook()  # pytest: no shell

    class ZMQInteractiveShell(InteractiveShell):  # ipykernel's, by name
        pass

    class Shell(ZMQInteractiveShell):  # Colab's subclass
        pass

    for cls, expected in ((InteractiveShell, False), (ZMQInteractiveShell, True), (Shell, True)):
        monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda cls=cls: object.__new__(cls))
        assert solutions.in_notebook() is expected, cls


def _run_notebook(folder, *cells):
    """Run the cells in a real Jupyter kernel started in `folder` (as JupyterLab, `execute` and nbgrader do)."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


@pytest.mark.slow
def test_a_teacher_running_two_submissions_never_runs_one_s_kernel_as_the_other_s(tmp_path, monkeypatch):
    """Item 4 for real: COURSE_MINE_DIR unset, alice's notebook run in her folder, then bob's in his."""
    monkeypatch.delenv("COURSE_MINE_DIR", raising=False)
    checkout = nbtools.EXERCISES / "mine"
    before = sorted(p.name for p in checkout.iterdir()) if checkout.is_dir() else None
    alice, bob = tmp_path / "submitted" / "alice", tmp_path / "submitted" / "bob"
    alice.mkdir(parents=True)
    bob.mkdir()
    out = _run_notebook(alice, "import course\nfrom course.checks.data import check_scale_kernel", SCALE_CELL,
                        "check_scale_kernel(scale_kernel)")
    assert "✓ Exercise 1.2 passed" in out[2] and f"saved for course.use_mine(): {alice / 'mine'}" in out[2], out
    out = _run_notebook(bob, "import course\ncourse.use_mine(['1.2'])")
    assert "no passing solutions of yours" in out[0], out
    after = sorted(p.name for p in checkout.iterdir()) if checkout.is_dir() else None
    assert after == before  # nothing saved into the teacher's checkout
