"""The machinery of exercise checks that a wrong kernel cannot fool: random inputs, sizes that are and are not
multiples of the block, several launch shapes, NaN-filled outputs (unwritten elements show), guard cells around
every array (out-of-bounds writes show, and out-of-bounds reads stay inside memory the check owns), inputs
compared after every launch (a kernel must not write into them), a synchronize after every launch (a GPU fault
is reported with the case that caused it), and failures that say what is wrong and where, with the code-level
hint kept for `hint("N.M")`."""
import functools
import inspect
import os
import re
import sys
from math import prod

import numpy as np
from numba import cuda

import course
from course import mine

GUARD_FLOAT = np.float32(-7.77e33)  # what guard cells hold; a kernel has no reason to write it
GUARD_INT = -987654321
# run_inplace_steps' default tolerances: float32, a few roundings per step; a GPU fuses a*b+c into one FMA, NumPy
# rounds twice
INPLACE_ATOL, INPLACE_RTOL = 1e-6, 1e-5

HINTS = {}        # "2.1" -> the code-level hint, printed by hint("2.1") only when a student asks
POISONED = None   # set to a description of the GPU fault once one has made this process's CUDA context unusable
STUB_RE = re.compile(r"^Exercise \d+\.\d+: ")  # the label of the stub `python -m course exercises` writes
_CHECKS_DIR = os.path.dirname(os.path.abspath(__file__))
_COURSE_DIR = os.path.dirname(_CHECKS_DIR)  # the course package: the checks and the solutions they may call
# CUDA errors after which the context is unusable: every later call in the process fails with the same error
STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_LAUNCH_TIMEOUT": 702, "CUDA_ERROR_ASSERT": 710,
          "CUDA_ERROR_HARDWARE_STACK_ERROR": 714, "CUDA_ERROR_ILLEGAL_INSTRUCTION": 715,
          "CUDA_ERROR_MISALIGNED_ADDRESS": 716, "CUDA_ERROR_INVALID_ADDRESS_SPACE": 717,
          "CUDA_ERROR_INVALID_PC": 718, "CUDA_ERROR_LAUNCH_FAILED": 719}
RESTART = ("This process's CUDA context is now unusable: every later GPU call fails, correct code included. "
           "Restart the kernel (Kernel > Restart) and re-run the notebook from the top.")


class CheckFailure(AssertionError):
    """A check found a wrong answer; the message says where and hints why."""

    def _render_traceback_(self):
        """What IPython/Jupyter shows: the message alone, without the check's code (it holds the answer)."""
        return [f"{type(self).__name__}: {self}"]


def hint(exercise):
    """Print the code-level hint of an exercise, e.g. hint("2.1"): ask for it after trying on your own."""
    key = str(exercise).replace("Exercise", "").strip()
    if key not in HINTS:  # the notebook imported only its own checks: load them all
        import importlib
        import pkgutil
        for m in pkgutil.iter_modules([_CHECKS_DIR]):
            importlib.import_module(f"course.checks.{m.name}")
    if key not in HINTS:
        raise ValueError(f"no exercise {key!r}; exercises with hints: {', '.join(sorted(HINTS))}")
    print(f"Exercise {key}, more help:\n{HINTS[key]}")


def _number(exercise):
    return str(exercise).replace("Exercise", "").strip()


def _more(number):
    return f"More help: hint('{number}')  (after: from course.checks import hint)"


def fail(exercise, case, msg, hint):
    """Raise CheckFailure: which exercise, in which case, what is wrong, what to look at, where more help is."""
    __tracebackhide__ = True
    more = f"\n  {_more(_number(exercise))}" if _number(exercise) in HINTS else ""
    raise CheckFailure(f"{exercise} failed {case}:\n  {msg}\n  Hint: {hint}{more}") from None


def passed(exercise, fn, what):
    """A check passed: the one place that says so, and saves the solution where course.use_mine() finds it."""
    print(f"✓ {exercise} passed" + (f": {what}" if what else ""))
    mine.record(exercise, fn)


def is_stub(fn, _seen=None):
    """The generated stub's message if fn (or a device function it calls) still holds
    `raise NotImplementedError("Exercise N.M: ...")`; else None. A NotImplementedError of the student's own
    (an input the function does not support) does not count."""
    _seen = set() if _seen is None else _seen
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is None or code in _seen:
        return None
    _seen.add(code)
    if "NotImplementedError" in code.co_names:
        msg = next((c for c in code.co_consts if isinstance(c, str) and STUB_RE.match(c)), None)
        if msg:
            return msg
    for callee in device_functions(py):
        msg = is_stub(callee, _seen)
        if msg:
            return msg
    return None


def raise_if_unimplemented(fn):
    """Raise the stub's NotImplementedError before running a function or kernel that is still the stub.
    Needed because on a real GPU a `raise` inside a kernel never reaches Python."""
    __tracebackhide__ = True
    msg = is_stub(fn)
    if msg:
        raise NotImplementedError(msg)


def device_functions(fn):
    """The @cuda.jit functions (device functions, kernels) that fn's code names as globals."""
    py = getattr(fn, "py_func", fn)
    g = getattr(py, "__globals__", {})
    code = getattr(py, "__code__", None)
    return [g[n] for n in sorted(_names(code)) if hasattr(g.get(n), "py_func")] if code else []


def _names(code):
    """Every global and attribute name a code object (and any code nested in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def code_names(fn, _seen=None):
    """Every name fn's code uses, and the code of every device function it calls (so that a reduction
    factored into a `@cuda.jit(device=True)` helper counts as the kernel's)."""
    _seen = set() if _seen is None else _seen
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is None or code in _seen:
        return set()
    _seen.add(code)
    names = _names(code)
    for callee in device_functions(py):
        names |= code_names(callee, _seen)
    return names


def _sticky(e):
    """Whether exception e is a CUDA error that leaves the context unusable (illegal address, ...)."""
    code = getattr(e, "code", None)
    try:
        if code is not None and int(code) in STICKY.values():
            return True
    except (TypeError, ValueError):
        pass
    text = f"{type(e).__name__} {e} {getattr(code, 'name', '')}"
    return any(name in text for name in STICKY)


def _poison(exercise, case, e):
    """Remember that the context is gone, and fail with the case that did it."""
    global POISONED
    POISONED = f"{exercise} {case}: {type(e).__name__}: {e}"
    fail(exercise, case, f"the GPU stopped your kernel: {type(e).__name__}: {e}. A thread read or wrote far "
         f"outside its arrays (or at a misaligned address). {RESTART}",
         "look at the indices of every read and write: is each one guarded by the array's shape?")


def gpu_usable(exercise):
    """Fail first, with what to do, if an earlier fault left this process's CUDA context unusable."""
    global POISONED
    __tracebackhide__ = True
    if POISONED is None and not course.SIMULATOR:
        try:
            cuda.synchronize()  # cheap on a healthy context; a sticky error shows here
        except Exception as e:
            if not _sticky(e):
                raise
            POISONED = f"a kernel that ran before this check: {type(e).__name__}: {e}"
    if POISONED is not None:
        raise CheckFailure(f"{exercise} cannot run: an earlier kernel crashed the GPU ({POISONED}).\n  {RESTART}"
                           ) from None


def _from_student(e):
    """Whether the exception went through code that is not the checks' own (the student's function)."""
    tb = e.__traceback__
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if not (f.startswith(_COURSE_DIR) or f.startswith(sys.prefix) or f.startswith(sys.base_prefix)
                or "site-packages" in f or f.startswith("<frozen")):
            return True
        tb = tb.tb_next
    return False


def _student_where(e):
    """' (line N of your code: `...`)' for the innermost frame of e's traceback outside the checks, or ''."""
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not (
        f.filename.startswith(_COURSE_DIR) or f.filename.startswith(sys.prefix) or "site-packages" in f.filename)]
    if not frames:
        return ""
    f = frames[-1]
    return f" (line {f.lineno} of {f.name}: `{(f.line or '').strip()}`)"


def call(exercise, case, fn, *args, hint="read the error: it names the line of your function that raised", **kw):
    """Call the student's fn; an exception it raises becomes a CheckFailure naming the case."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kw)
    except CheckFailure:
        raise
    except NotImplementedError as e:
        if STUB_RE.match(str(e)):
            raise
        fail(exercise, case, f"your function raised NotImplementedError: {e}", hint)
    except Exception as e:
        if _sticky(e):
            _poison(exercise, case, e)
        fail(exercise, case, f"your function raised {type(e).__name__}: {e}{_student_where(e)}", hint)


def simulated():
    """The checks run kernels in numba's CUDA simulator, also where launches otherwise go to the CPU executor: it
    catches what the executor cannot (a missing barrier, out-of-bounds reads as they happen)."""
    import contextlib
    if course.SIMULATOR:
        from course.cpu import simulating
        return simulating()
    return contextlib.nullcontext()


def exercise(number, more):
    """Decorator for a check(fn, ...): registers hint(number), stops on the stub, on an unusable GPU context,
    turns an exception of the student's code into a CheckFailure and keeps the check's code (which computes
    the answer) out of the traceback. The check returns a one-line summary of what it tried."""
    def wrap(check):
        HINTS[number] = more

        @functools.wraps(check)
        def run(fn, *args, **kw):
            __tracebackhide__ = True
            ex = f"Exercise {number}"
            raise_if_unimplemented(fn)
            gpu_usable(ex)
            failure = None
            try:
                with simulated():
                    what = check(fn, *args, **kw)
            except CheckFailure as e:
                failure = str(e)
            except NotImplementedError as e:
                if not STUB_RE.match(str(e)) and _from_student(e):
                    failure = (f"{ex} failed: your function raised NotImplementedError: {e}\n  Hint: only the "
                               f"stub's own message means 'not done yet'\n  {_more(number)}")
                else:
                    raise
            except Exception as e:
                if _sticky(e):  # a fault in a kernel the student's function launched, seen at a later call
                    global POISONED
                    POISONED = f"{ex}: {type(e).__name__}: {e}"
                    failure = (f"{ex} failed: the GPU stopped a kernel your function launched: {type(e).__name__}: "
                               f"{e}.\n  {RESTART}\n  Hint: look at the indices of every read and write of the "
                               "kernels it launches: is each one guarded by the array's shape?")
                elif not _from_student(e):
                    raise
                else:
                    failure = (f"{ex} failed: your function raised {type(e).__name__}: {e}{_student_where(e)}\n"
                               "  Hint: read the "
                               f"error: it names the line of your code that raised\n  {_more(number)}")
            if failure is not None:
                raise CheckFailure(failure) from None  # a fresh traceback: this line, not the check's internals
            passed(ex, fn, what)

        run.exercise = number
        return run
    return wrap


class Padded:
    """An array on the device inside `guard` cells of `fill` on every side: the one padding of every check.

    `view` is the part of `a`'s shape inside the buffer, what the kernel gets; `buf` the whole device buffer;
    `host` the whole buffer as it was sent. A write past an edge changes a cell (`guards`, `unchanged` see it),
    and a read past an edge gets `fill` instead of faulting (on a GPU as in the simulator)."""

    def __init__(self, a, guard, fill):
        a = np.asarray(a)
        self.shape, self.guard, self.fill = a.shape, guard, fill
        self.inner = tuple(slice(guard, guard + n) for n in a.shape)
        self.host = np.full(tuple(n + 2 * guard for n in a.shape), fill, dtype=a.dtype)
        self.host[self.inner] = a
        self.buf = cuda.to_device(self.host)
        self.view = self.buf[self.inner]

    def guards(self, exercise, case, hint):
        """Copy the buffer back, fail if any cell around the array changed, and return the array's part."""
        __tracebackhide__ = True
        full = self.buf.copy_to_host()
        mask = np.ones(full.shape, bool)
        mask[self.inner] = False
        touched = mask & (full != self.fill)
        if touched.any():
            pos = tuple(int(i) - self.guard for i in np.argwhere(touched)[0])
            fail(exercise, case, f"wrote outside the output, at index {pos} of an array shaped {self.shape} "
                 f"({touched.sum()} cells past the edges)", hint)
        return full[self.inner]

    def unchanged(self, exercise, case, name, hint):
        """Fail if the buffer (the array or the cells around it) is not what was sent: for inputs."""
        __tracebackhide__ = True
        now, host = self.buf.copy_to_host(), self.host
        same = (now == host) | (np.isnan(now) & np.isnan(host)) if host.dtype.kind == "f" else now == host
        if not same.all():
            pos = tuple(int(i) - self.guard for i in np.argwhere(~same)[0])
            where = "inside it" if all(0 <= p < n for p, n in zip(pos, self.shape)) else "past its edges"
            fail(exercise, case, f"your kernel wrote into its input {name} (at index {pos}, {where}; "
                 f"{(~same).sum()} cells changed): inputs must stay as they were, write only the output", hint)


def padded_output(shape, dtype, guard):
    """An output: filled with NaN (floats) or a sentinel (ints) so that an element left unwritten shows, inside
    GUARD_* cells so that a write past any edge shows."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return Padded(np.full(tuple(shape), np.nan, dtype), guard, GUARD_FLOAT)
    return Padded(np.full(tuple(shape), GUARD_INT + 1, dtype), guard, GUARD_INT)


def padded_input(a, guard):
    """An input: `a` inside padding cells of NaN (which poisons whatever a read past an edge touches, even a product
    with 0) or index 0 (so that a gathered index stays valid); compare it after the launch with `unchanged`."""
    a = np.asarray(a)
    return Padded(a, guard, np.nan if a.dtype.kind == "f" else 0)


def padded_inout(a, guard):
    """An in/out array (an update kernel's parameters and state): `a`'s values inside GUARD_FLOAT cells."""
    return Padded(a, guard, GUARD_FLOAT)


def unwritten(got, dtype):
    """Boolean mask of elements still holding the 'unwritten' fill."""
    return np.isnan(got) if np.dtype(dtype).kind == "f" else got == GUARD_INT + 1


def compare(exercise, case, got, expected, atol, rtol, hint, diagnose=None):
    """Fail on the first unwritten or wrong element, naming its index, expected and got.

    diagnose(got, expected) may return a sentence that names a typical mistake (e.g. a missing factor)."""
    __tracebackhide__ = True
    bad = unwritten(got, expected.dtype) & ~unwritten(expected, expected.dtype)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(exercise, case, f"element {idx} is NaN: never written, or computed from values read outside "
             f"the inputs ({bad.sum()} of {bad.size} elements)", hint)
    if expected.dtype.kind == "f":
        wrong = ~np.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    else:
        wrong = got != expected
    if wrong.any():
        idx = tuple(int(i) for i in np.argwhere(wrong)[0])
        why = diagnose(got, expected) if diagnose else None
        fail(exercise, case, f"element {idx}: expected {expected[idx]!r}, got {got[idx]!r} "
             f"({wrong.sum()} of {wrong.size} elements wrong)" + (f". {why}" if why else ""), hint)


def factor(got, expected):
    """The constant c with got == c * expected, if there is one (a forgotten or extra division), else None."""
    m = np.abs(expected) > 1e-6
    if not m.any() or not np.all(np.isfinite(got[m])):
        return None
    r = got[m].astype(np.float64) / expected[m]
    c = float(np.median(r))
    return c if abs(c - 1) > 1e-3 and np.allclose(r, c, rtol=1e-3) else None


def settle_simulator(kernel, timeout=30.0):
    """After a simulated kernel raised: wait for its threads and restore `cuda` (course.device.settle_simulator)."""
    from course.device import settle_simulator
    settle_simulator(kernel, timeout)


def launch(exercise, case, kernel, grid, block, args, hint):
    """Launch and synchronise, turning an out-of-bounds access, an exception or a GPU fault into a check
    failure that names the case."""
    __tracebackhide__ = True
    try:
        kernel[grid, block](*args)
        cuda.synchronize()  # a fault of this launch shows here, with this case, not at a later allocation
    except Exception as e:
        if _sticky(e):
            _poison(exercise, case, e)
        if course.SIMULATOR:
            settle_simulator(kernel)
            if isinstance(e, IndexError):  # the simulator checks bounds; a GPU does not (guard cells catch it)
                fail(exercise, case, f"out-of-bounds access: {e}", hint)
        if isinstance(e, NotImplementedError) and STUB_RE.match(str(e)):
            raise
        what = "the GPU refused the launch:" if "Cuda" in type(e).__name__ else "your kernel raised"
        fail(exercise, case, f"{what} {type(e).__name__}: {e}", hint)


def check_inputs(exercise, case, inputs, names, hint):
    """Fail if a launch changed an input (or the padding around it): inputs are read-only. `inputs` maps an
    argument's position to its Padded."""
    __tracebackhide__ = True
    for k, p in inputs.items():
        p.unchanged(exercise, case, names[k], hint)


def _dims(x):
    return x if isinstance(x, tuple) else (x,)


def is_round(case):
    """Whether a case's sizes are whole multiples of its block (or `unit`) along every launch axis, for some
    output (x is the last axis, y the one before): a kernel that only handles full blocks passes such a case."""
    unit = _dims(case.get("unit", case["block"]))
    outs = case["expected"] if isinstance(case["expected"], tuple) else (case["expected"],)
    return any(len(e.shape) >= len(unit) and all(n % u == 0 for n, u in zip(reversed(e.shape), unit))
               for e in outs)


def require_round_and_odd(exercise, cases):
    """A check's cases must include sizes that are multiples of the block and sizes that are not."""
    kinds = {is_round(c) for c in cases}
    if kinds != {True, False}:
        missing = "a multiple of" if True not in kinds else "not a multiple of"
        raise ValueError(f"{exercise}'s check has no case whose sizes are {missing} the block: add one")


def _arg_names(kernel, count):
    py = getattr(kernel, "py_func", kernel)
    try:
        names = list(inspect.signature(py).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[k] if k < len(names) else f"argument {k + 1}" for k in range(count)]


def run_cases(exercise, kernel, cases, hint, atol=0.0, rtol=0.0, diagnose=None):
    """Run every case: dict(name, grid, block, inputs, expected) and report the first problem; return a summary.

    `inputs` are host arrays (copied to guarded device buffers) or scalars; `expected` is one host array or a
    tuple of them: the kernel's outputs, passed after the inputs, each NaN-filled and guarded. The cases must
    include sizes that are multiples of the block and sizes that are not (`unit`, if given, replaces the block
    as what sizes are multiples of). After each launch every input is compared with what it was."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    require_round_and_odd(exercise, cases)
    for c in cases:
        expected = c["expected"] if isinstance(c["expected"], tuple) else (c["expected"],)
        guard = max(max(_dims(c["block"])), 4)
        outs = [padded_output(e.shape, e.dtype, guard) for e in expected]
        args, inputs = [], {}
        for k, a in enumerate(c["inputs"]):
            a = np.asarray(a)
            if a.ndim == 0:
                args.append(a[()])
                continue
            inputs[k] = padded_input(a, guard)
            args.append(inputs[k].view)
        args += [out.view for out in outs]
        case = f"with {c['name']}, grid={c['grid']}, block={c['block']}"
        launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
        check_inputs(exercise, case, inputs, _arg_names(kernel, len(args)), hint)
        for k, (out, e) in enumerate(zip(outs, expected)):
            which = f" (output {k + 1} of {len(expected)})" if len(expected) > 1 else ""
            got = out.guards(exercise, case + which, hint)
            compare(exercise, case + which, got, e, atol, rtol, hint, diagnose)
    shapes = sorted({str(c["block"]) for c in cases})
    return (f"{len(cases)} random cases (sizes that are and are not multiples of the block), "
            f"blocks {', '.join(shapes)}")


def run_inplace_steps(exercise, kernel, cases, hint, atol=INPLACE_ATOL, rtol=INPLACE_RTOL):
    """Run every case of an in-place update kernel for several steps and report the first problem.

    A case is dict(name, grid, block, names, state, steps): `state` are the host arrays updated in place
    (parameters first, then the optimizer's state, as named by `names`); each step is
    (gradient, scalars, expected state after the step). The kernel is called as
    kernel(state[0], gradient, *state[1:], *scalars): parameters, gradient, state, hyperparameters."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    unit = lambda c: c.get("unit", c["block"])  # noqa: E731
    if {all(a.size % unit(c) == 0 for a in c["state"]) for c in cases} != {True, False}:
        raise ValueError(f"{exercise}'s check needs sizes that are and are not multiples of the block")
    for c in cases:
        block = c["block"] if isinstance(c["block"], tuple) else (c["block"],)
        grid = c["grid"] if isinstance(c["grid"], tuple) else (c["grid"],)
        threads = prod(grid) * prod(block)  # guard cells cover every thread past the end, spare blocks too
        guard = max(max(block), 4, threads - min(a.size for a in c["state"]))
        bufs = [padded_inout(a, guard) for a in c["state"]]
        before = [np.asarray(a) for a in c["state"]]
        for k, (g, scalars, expected) in enumerate(c["steps"], 1):
            case = f"with {c['name']}, step {k} of {len(c['steps'])}, grid={c['grid']}, block={c['block']}"
            views = [p.view for p in bufs]
            grad = padded_input(g, guard)
            args = [views[0], grad.view, *views[1:], *scalars]
            launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
            for p, name, e, prev in zip(bufs, c["names"], expected, before):
                where = f"{case} (array {name})"
                got = p.guards(exercise, where, hint)
                stale = (got == prev) & ~np.isclose(e, prev, atol=atol, rtol=rtol)
                if stale.any():
                    idx = tuple(int(i) for i in np.argwhere(stale)[0])
                    fail(exercise, where, f"{name}{list(idx)} did not change in this step (it still holds "
                         f"{prev[idx]!r}, expected {e[idx]!r}): never written, or the update came out as zero? "
                         f"({stale.sum()} of {stale.size} elements unchanged)", hint)
                compare(exercise, where, got, e, atol, rtol, hint)
            grad.unchanged(exercise, case, "g (the gradient)", hint)
            before = list(expected)
    shapes = sorted({str(c["block"]) for c in cases})
    return (f"{len(cases)} random cases x {len(cases[0]['steps'])} steps (sizes that are and are not multiples "
            f"of the block), blocks {', '.join(shapes)}")


_THREAD_ATTRS = {"threadIdx", "laneid", "grid", "warpid"}  # cuda.<these> differ between the threads of a block


def divergent_barriers(kernel):
    """Source lines (of the kernel's own code) where a cuda.syncthreads() sits inside an `if` or `while` whose
    condition depends on the thread, or follows a `return` inside one: not every thread of the block reaches it,
    undefined behaviour on a GPU. Found by reading the code, so it works on a GPU too; [] if there is no source."""
    import ast
    import textwrap
    py = getattr(kernel, "py_func", kernel)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(py)))
    except (OSError, TypeError, SyntaxError):
        return []
    first = getattr(py, "__code__", None).co_firstlineno - 1 if hasattr(py, "__code__") else 0

    def names(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def threaded(node, tainted):
        attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        return bool(attrs & _THREAD_ATTRS) or bool(names(node) & tainted)

    tainted = set()
    for _ in range(3):  # a few passes: taint flows through later assignments and loops
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                    and threaded(node.value, tainted):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    tainted |= names(t)

    def is_barrier(n):
        return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "syncthreads"

    found = []
    barriers = [n for n in ast.walk(tree) if is_barrier(n)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While)) and threaded(node.test, tainted):
            inner = [n for n in ast.walk(node) if is_barrier(n)]
            found += [first + n.lineno for n in inner]
            if any(isinstance(n, ast.Return) for n in ast.walk(node)):
                found += [first + b.lineno for b in barriers if b.lineno > node.lineno and b not in inner]
    return sorted(set(found))
