"""Import course first: it chooses the GPU or the CUDA simulator before numba.cuda is imported.

Shared helpers of the check tests: `mutant` plants a one-line bug in a solution, `rejects` asserts a check fails."""
import ast
import inspect
import linecache
import os
import tempfile
import textwrap

import pytest

import course  # noqa: F401

MNIST_TRAIN = 3 * 8 + 5  # training rows of the `data` fixture: three batches of 8, 5 left over
MNIST_TEST = 16          # its test rows

# The tests run their kernels in the simulator, as before the CPU executor (course/runtime/cpu.py) came; tests/test_cpu.py
# runs them on the executor (course.runtime.cpu.running()). Notebooks and `python -m course` in subprocesses choose for
# themselves (COURSE_DEVICE, or the executor without a GPU).
if course.SIMULATOR:
    course.runtime.cpu.enable(False)

# A passing check saves the solution for course.use_mine(): in tests (and the notebooks and JupyterLab they start),
# into a folder of this test process, never into the checkout's notebooks/exercises/mine/. Each pytest-xdist worker
# makes its own (a worker inherits the controller's environment, so an inherited folder of ours is replaced); a
# COURSE_MINE_DIR set before pytest is kept.
def own_mine_dir(environ, pid):
    """Point environ's COURSE_MINE_DIR at a new folder for process `pid`, unless it was set before pytest."""
    if environ.get("COURSE_MINE_DIR_OF") not in (None, str(pid)) or "COURSE_MINE_DIR" not in environ:
        environ["COURSE_MINE_DIR"] = os.path.join(tempfile.mkdtemp(prefix="course-mine-"), "mine")
        environ["COURSE_MINE_DIR_OF"] = str(pid)
    return environ["COURSE_MINE_DIR"]


own_mine_dir(os.environ, os.getpid())


@pytest.fixture(scope="session")
def data():
    """(X, y, Xt, yt): MNIST's first MNIST_TRAIN training and MNIST_TEST test images pooled to 7x7 (49 inputs), with
    their labels, read-only (every test of the session shares them)."""
    from course.data import load_mnist
    from course.train import pool
    X, y, Xt, yt = load_mnist(None)
    arrays = pool(X[:MNIST_TRAIN], 4), y[:MNIST_TRAIN].copy(), pool(Xt[:MNIST_TEST], 4), yt[:MNIST_TEST].copy()
    for a in arrays:
        a.setflags(write=False)
    return arrays


def mutant(fn, old, new, count=1, scope=None):
    """A copy of fn (a @cuda.jit kernel or device function, or a plain function) whose source (without its
    docstring) has `old` replaced by `new`; `old` must occur exactly `count` times (default once), so a planted
    bug cannot silently miss its target. The copy runs in fn's own globals (plus the names in `scope`, e.g. a mutated
    device function for it to call), and is re-jitted with cuda.jit if fn was a kernel."""
    from numba import cuda
    py = getattr(fn, "py_func", fn)
    src = textwrap.dedent(inspect.getsource(py))
    lines = src.splitlines()
    body = ast.parse(src).body[0].body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        del lines[body[0].lineno - 1:body[0].end_lineno]  # the docstring: mutations target code only
    src = "\n".join(line for line in lines if not line.lstrip().startswith("@"))  # and drop decorators
    found = src.count(old)
    assert found == count, f"{old!r} occurs {found} times in {py.__name__}, expected {count}"
    src = src.replace(old, new)
    name = f"<mutant of {py.__name__}: {old!r} -> {new!r}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # inspect.getsource works, as in Jupyter
    names = py.__globals__ if scope is None else {**py.__globals__, **scope}
    made = {}
    exec(compile(src, name, "exec"), names, made)
    out = made[py.__name__]
    out.__name__ = py.__name__
    if hasattr(fn, "py_func"):
        device = getattr(fn, "_device", None)  # the simulator's kernels
        if device is None:
            device = fn.targetoptions.get("device", False)
        return cuda.jit(device=True)(out) if device else cuda.jit(out)
    return out


def rejects(check, wrong, exercise, says, *args, **kw):
    """Assert check(wrong) raises CheckFailure for `exercise` with a hint and one of `says`; return the message."""
    from course.checks import CheckFailure
    with pytest.raises(CheckFailure) as e:
        check(wrong, *args, **kw)
    msg = str(e.value)
    assert exercise in msg, msg
    assert "Hint:" in msg or "cannot run" in msg, msg
    assert any(s in msg for s in says), msg
    return msg


def mutated(fn, *edits):
    """fn with each edit (old, new) or (old, new, count) applied in turn by `mutant`: a planted bug that touches
    two places, e.g. moves a statement."""
    for old, new, *count in edits:
        fn = mutant(fn, old, new, *count)
    return fn


def registered_checks():
    """{exercise number: (its check module, the check)} for every check of course.checks (each module imported)."""
    import importlib
    import pkgutil

    import course.checks as checks_pkg
    found = {}
    for info in pkgutil.iter_modules(checks_pkg.__path__):
        module = importlib.import_module(f"course.checks.{info.name}")
        for name, fn in vars(module).items():
            if name.startswith("check_") and getattr(fn, "__module__", None) == module.__name__ \
                    and hasattr(fn, "exercise"):       # set by @exercise(number, ...)
                found[fn.exercise] = (module, fn)
    return found
