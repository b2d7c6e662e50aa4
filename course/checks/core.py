"""The machinery of exercise checks that a wrong kernel cannot fool: random inputs, sizes that are and are not
multiples of the block, several launch shapes, NaN-filled outputs (unwritten elements show), guard cells around
every array (out-of-bounds writes show, and out-of-bounds reads stay inside memory the check owns), inputs
compared after every launch (a kernel must not write into them), a synchronize after every launch (a GPU fault
is reported with the case that caused it), and failures that say what is wrong and where, with a ladder of
hints for `hint("N.M")` (nudges, then the answer's code on request). Two machines' eyes on every kernel: a compile
gate (what no GPU compiles, float64 in a float32 kernel) on either, and numba's simulator on a GPU too."""
import contextlib
import functools
import inspect
import os
import re
import sys
from math import prod

import numpy as np
from numba import cuda

import course
from course.runtime import solutions
from course.runtime.util import in_notebook

GUARD_FLOAT = np.float32(-7.77e33)  # what guard cells hold; a kernel has no reason to write it
GUARD_INT = -987654321
# run_inplace_steps' default tolerances: float32, a few roundings per step; a GPU fuses a*b+c into one FMA, NumPy
# rounds twice
INPLACE_ATOL, INPLACE_RTOL = 1e-6, 1e-5

HINTS = {}        # "2.1" -> the answer's code: the last level of hint("2.1", level=...), only when asked by name
LADDERS = {}      # "2.1" -> its nudges (prose, no code): hint("2.1") gives the next one
_hint_shown = {}  # "2.1" -> the highest level hint() has shown in this process
ANSWERS_ENV = "COURSE_HINT_ANSWERS"  # "0": the hints' last level (the answer's code) is off (a teacher's choice)
POISONED = None   # set to a description of the GPU fault once one has made this process's CUDA context unusable
STUB_RE = re.compile(r"^Exercise \d+\.\d+: ")  # the label of the stub `python -m course exercises` writes
_CHECKS_DIR = os.path.dirname(os.path.abspath(__file__))
_COURSE_DIR = os.path.dirname(_CHECKS_DIR)  # the course package: the checks and the solutions they may call
NO_ANSWERS_FILE = os.path.join(_CHECKS_DIR, "NO_HINT_ANSWERS")  # written by `student-build --no-hint-answers`
# CUDA errors after which the context is unusable: every later call in the process fails with the same error
STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_LAUNCH_TIMEOUT": 702, "CUDA_ERROR_ASSERT": 710,
          "CUDA_ERROR_HARDWARE_STACK_ERROR": 714, "CUDA_ERROR_ILLEGAL_INSTRUCTION": 715,
          "CUDA_ERROR_MISALIGNED_ADDRESS": 716, "CUDA_ERROR_INVALID_ADDRESS_SPACE": 717,
          "CUDA_ERROR_INVALID_PC": 718, "CUDA_ERROR_LAUNCH_FAILED": 719}
RESTART = ("This process's CUDA context is now unusable: every later GPU call fails, correct code included. "
           "Restart the kernel (Kernel > Restart) and re-run the notebook from the top.")


class CheckSignal(Exception):
    """A check's own trap, raised inside the student's code (a forbidden copy): `call` lets it through to the
    check that set the trap, which says what happened."""


class CheckFailure(AssertionError):
    """A check found a wrong answer; the message says where and hints why."""

    def _render_traceback_(self):
        """What IPython/Jupyter shows: the message alone, without the check's code (it holds the answer)."""
        return [f"{type(self).__name__}: {self}"]


def hint(exercise, level=None):
    """The next rung of an exercise's hint ladder, e.g. hint("2.1"): a nudge (what to look at, a question), never
    code; each call gives the next one. The last level, asked for by name (hint("2.1", level=3)), shows the
    answer's code, unless the teacher turned it off (ANSWERS_ENV, or a student build made with
    --no-hint-answers)."""
    key = str(exercise).replace("Exercise", "").strip()
    if key not in HINTS:  # the notebook imported only its own checks: load them all
        import importlib
        import pkgutil
        for m in pkgutil.iter_modules([_CHECKS_DIR]):
            importlib.import_module(f"course.checks.{m.name}")
    if key not in HINTS:
        raise ValueError(f"no exercise {key!r}; exercises with hints: {', '.join(sorted(HINTS))}")
    print(hint_text(key, level))


def hint_text(key, level=None):
    """What hint(key, level) prints: level None is the rung after the last one shown (nudges only)."""
    nudges = LADDERS.get(key, ())
    last = len(nudges) + 1
    if level is None:
        level = min(_hint_shown.get(key, 0) + 1, max(len(nudges), 1))
    if not 1 <= level <= last:
        raise ValueError(f"exercise {key} has hint levels 1 to {last}")
    _hint_shown[key] = max(_hint_shown.get(key, 0), level)
    if level == last:
        if not answers_shown():
            return (f"Exercise {key}, level {last} of {last} (the answer's code) is turned off for this class: "
                    f"your teacher chose it. Levels 1-{last - 1} are the nudges: hint('{key}', level=1) ...")
        return (f"Exercise {key}, level {last} of {last}: this shows the answer (code). Try the nudges first "
                f"(hint('{key}')).\n{HINTS[key]}")
    more = (f"Next: hint('{key}') for another nudge." if level < len(nudges) else
            f"That was the last nudge: hint('{key}', level={last}) shows the answer's code.")
    head = f"Exercise {key}, nudge {level} of {len(nudges)} (then level {last}: the answer's code)"
    return f"{head}:\n  {nudges[level - 1]}\n  {more}"


def answers_shown():
    """Whether the last level of the hints (the answer's code) is available: a teacher's switch, off under
    ANSWERS_ENV=0 or in a student build made with --no-hint-answers (which writes NO_ANSWERS_FILE)."""
    return os.environ.get(ANSWERS_ENV, "1") != "0" and not os.path.exists(NO_ANSWERS_FILE)


def register_hints(number, answer, nudges):
    """Exercise `number`'s hint ladder: the nudges (prose, no code) in order, then the answer's code."""
    HINTS[number] = answer
    LADDERS[number] = tuple(nudges)


def _number(exercise):
    return str(exercise).replace("Exercise", "").strip()


def _more(number):
    return f"More help: hint('{number}')  (after: from course.checks import hint)"


def fail(exercise, case, msg, hint):
    """Raise CheckFailure: which exercise, in which case, what is wrong, what to look at, where more help is."""
    __tracebackhide__ = True
    more = f"\n  {_more(_number(exercise))}" if _number(exercise) in HINTS else ""
    raise CheckFailure(f"{exercise} failed {case}:\n  {msg}\n  Hint: {hint}{more}") from None


def course_own(fn):
    """The course module that defines fn (a star import's kernel, say), or None: the student's own code."""
    module = str(getattr(getattr(fn, "py_func", fn), "__module__", None))
    return module if module.startswith("course.") else None


def passed(exercise, fn, what, check=None):
    """A check passed: the one place that says so, then saves the solution (solutions.record); a failed save never undoes
    the pass."""
    print(f"✓ {exercise} passed" + (f": {what}" if what else ""))
    try:
        solutions.record(exercise, fn, check=check)
    except Exception as e:  # the pass stands: one line, no traceback
        why = " ".join(str(e).split())[:200]
        print(f"  (not saved: {type(e).__name__}{': ' + why if why else ''})")


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
    except (CheckFailure, CheckSignal):
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
        from course.runtime.cpu import simulating
        return simulating()
    return contextlib.nullcontext()


def exercise(number, more, nudges=()):
    """Decorator for a check(fn, ...): registers hint(number) (`nudges`, then `more`: the answer's code), stops on
    the stub, on an unusable GPU context, turns an exception of the student's code into a CheckFailure and keeps
    the check's code (which computes the answer) out of the traceback. The check returns a one-line summary of
    what it tried."""
    def wrap(check):
        register_hints(number, more, nudges)

        @functools.wraps(check)
        def run(fn, *args, **kw):
            __tracebackhide__ = True
            ex = f"Exercise {number}"
            raise_if_unimplemented(fn)
            own = course_own(fn) if in_notebook() else None
            if own:  # in a notebook, the check cell run before the exercise cell, on a star import's function
                name = getattr(getattr(fn, "py_func", fn), "__name__", "this function")
                raise CheckFailure(f"{ex} not checked: this {name} is the course's own, from {own}, not yours: run "
                                   "your exercise cell, then this check") from None
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
            passed(ex, fn, what, check=check.__name__)

        run.exercise = number   # which exercise this check is (tests and tools read it)
        return run
    return wrap


class Padded:
    """An array on the device inside `guard` cells of `fill` on every side: the one padding of every check.

    `view` is the part of `a`'s shape inside the buffer, what the kernel gets; `buf` the whole device buffer;
    `host` the whole buffer as it was sent. A write past an edge changes a cell (`guards`, `unchanged` see it),
    and a read past an edge gets `fill` instead of faulting (on a GPU as in the simulator)."""

    def __init__(self, a, guard, fill, to_device=None):
        a = np.asarray(a)
        self.shape, self.guard, self.fill = a.shape, guard, fill
        self.inner = tuple(slice(guard, guard + n) for n in a.shape)
        self.host = np.full(tuple(n + 2 * guard for n in a.shape), fill, dtype=a.dtype)
        self.host[self.inner] = a
        self.buf = (to_device or cuda.to_device)(self.host)  # to_device: the simulator's, on a GPU (simulator_eyes)
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


def padded_output(shape, dtype, guard, to_device=None):
    """An output: filled with NaN (floats) or a sentinel (ints) so that an element left unwritten shows, inside
    GUARD_* cells so that a write past any edge shows."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return Padded(np.full(tuple(shape), np.nan, dtype), guard, GUARD_FLOAT, to_device)
    return Padded(np.full(tuple(shape), GUARD_INT + 1, dtype), guard, GUARD_INT, to_device)


def padded_input(a, guard, to_device=None):
    """An input: `a` inside padding cells of NaN (which poisons whatever a read past an edge touches, even a product
    with 0) or index 0 (so that a gathered index stays valid); compare it after the launch with `unchanged`."""
    a = np.asarray(a)
    return Padded(a, guard, np.nan if a.dtype.kind == "f" else 0, to_device)


def padded_inout(a, guard, to_device=None):
    """An in/out array (an update kernel's parameters and state): `a`'s values inside GUARD_FLOAT cells."""
    return Padded(a, guard, GUARD_FLOAT, to_device)


def unwritten(got, dtype):
    """Boolean mask of elements still holding the 'unwritten' fill."""
    return np.isnan(got) if np.dtype(dtype).kind == "f" else got == GUARD_INT + 1


def plain(x):
    """A value as a student reads it: a NumPy scalar as its number (16, 0.1, nan), not NumPy 2's repr
    (np.int64(16), np.float32(0.1)); anything else as repr."""
    return str(x) if isinstance(x, np.generic) and not isinstance(x, (np.bytes_, np.str_)) else repr(x)


def element(idx, axes=None):
    """An output's index as the message names it: (16, 0), or with `axes` ("thread", "acc index") (thread 16, acc
    index 0)."""
    if not axes:
        return str(idx)
    return "(" + ", ".join(f"{a} {i}" for a, i in zip(axes, idx)) + ")"


def compare(exercise, case, got, expected, atol, rtol, hint, diagnose=None, axes=None):
    """Fail on the first unwritten or wrong element, naming its index (with `axes`, each named), expected and got.

    diagnose(got, expected) may return a sentence that names a typical mistake (e.g. a missing factor)."""
    __tracebackhide__ = True
    bad = unwritten(got, expected.dtype) & ~unwritten(expected, expected.dtype)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(exercise, case, f"element {element(idx, axes)} is NaN: never written, or computed from values read "
             f"outside the inputs ({bad.sum()} of {bad.size} elements)", hint)
    if expected.dtype.kind == "f":
        wrong = ~np.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    else:
        wrong = got != expected
    if wrong.any():
        idx = tuple(int(i) for i in np.argwhere(wrong)[0])
        why = diagnose(got, expected) if diagnose else None
        fail(exercise, case, f"element {element(idx, axes)}: expected {plain(expected[idx])}, got {plain(got[idx])} "
             f"({wrong.sum()} of {wrong.size} elements wrong)" + (f". {why}" if why else ""), hint)


def factor(got, expected):
    """The constant c with got == c * expected, if there is one (a forgotten or extra division), else None."""
    m = np.abs(expected) > 1e-6
    if not m.any() or not np.all(np.isfinite(got[m])):
        return None
    r = got[m].astype(np.float64) / expected[m]
    c = float(np.median(r))
    return c if abs(c - 1) > 1e-3 and np.allclose(r, c, rtol=1e-3) else None


class Machine:
    """Where a check's case runs: `to_device` makes its buffers, `launch` runs the kernel, `where` starts the
    case's name (the simulator's run on a GPU says so)."""

    def __init__(self, to_device, launch, where=""):
        self.to_device, self.launch, self.where = to_device, launch, where


ON_THIS_DEVICE = Machine(None, lambda *a: launch(*a))  # cuda.to_device, this machine's CUDA (GPU or simulator)
SIM_ENV = "COURSE_SIMULATOR_EYES"  # "0": on a GPU, skip the simulator's run; "always": in the simulator too (tests)


def simulator_eyes(cases, run_case, odd, instrument=True):
    """On a GPU, run the smallest case for which odd(case) through numba-cuda's simulator too, in this process:
    its bounds checks see a read past an input's end that guard cells hide on a GPU, its NaN-filled shared and
    local arrays a read of a cell no thread wrote, and its thread order (each thread runs up to a barrier) a
    missing cuda.syncthreads() that the GPU's warps happened to hide. Nothing in the simulator: it ran them all.
    `instrument=False`: run_case installs its own simulator instruments (course.runtime.device.instruments)."""
    __tracebackhide__ = True
    if (course.SIMULATOR and os.environ.get(SIM_ENV) != "always") or os.environ.get(SIM_ENV, "1") == "0":
        return
    from course.runtime import device
    small = min((c for c in cases if odd(c)), key=_threads, default=None)
    if small is None:
        return
    sim = Machine(device.simulator_to_device, _simulator_launch,
                  "in numba's simulator (which the checks run on a GPU too, for what a GPU does not show) ")
    try:
        if not instrument:
            return run_case(small, sim)
        with device.instruments(fill=_nan_fill):
            run_case(small, sim)
    except device.NotSimulable:  # a warp shuffle: the simulator has none, the GPU's run is all there is
        return


def _threads(c):
    """How many GPU threads a case launches (what the simulator's run costs)."""
    return prod(_dims(c["grid"])) * prod(_dims(c["block"]))


def _nan_fill(a):
    """Fill a new shared or local array as a GPU never would: NaN (floats) or a sentinel, so a read before any
    write shows in the result."""
    a.fill(np.nan if a.dtype.kind == "f" else GUARD_INT)


def _simulator_launch(exercise, case, kernel, grid, block, args, hint):
    """Launch `kernel`'s simulated twin (course.runtime.device.simulated); an IndexError is an out-of-bounds access."""
    __tracebackhide__ = True
    from course.runtime import device
    sim = device.simulated(kernel)
    try:
        with quiet_simulator():
            sim[grid, block](*args)
    except Exception as e:
        settle_simulator(sim)
        if isinstance(e, IndexError):
            fail(exercise, case, f"out-of-bounds access: {e} (on a GPU the read got a guard cell's value, "
                 "which this result did not show)", hint)
        fail(exercise, case, f"your kernel raised {type(e).__name__}: {e}", hint)


@contextlib.contextmanager
def quiet_simulator():
    """While a kernel runs: no RuntimeWarning from NumPy (a simulated thread's 0 / 0 prints one above the check's
    message; a GPU says nothing, and the check's message names the NaN it gives)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def settle_simulator(kernel, timeout=30.0):
    """After a simulated kernel raised: wait for its threads and restore `cuda` (course.runtime.device.settle_simulator)."""
    from course.runtime.device import settle_simulator
    settle_simulator(kernel, timeout)


def _what(x):
    """A short name of what a check got instead of a kernel: "a function (no @cuda.jit)", "int 5"."""
    if callable(x):
        return f"a function {getattr(x, '__name__', '')!s} without @cuda.jit".replace("  ", " ")
    return f"{type(x).__name__} {x!r}"[:80]


def launch(exercise, case, kernel, grid, block, args, hint):
    """Launch and synchronise, turning an out-of-bounds access, an exception or a GPU fault into a check
    failure that names the case. First the compile gate (`compile_gate`): on either machine, a kernel that no
    GPU compiles, or one that computes in float64 on float32 arrays, fails before it runs."""
    __tracebackhide__ = True
    if not (hasattr(kernel, "py_func") and hasattr(kernel, "__getitem__")):  # an int, a plain function, ...
        fail(exercise, case, f"expected a @cuda.jit kernel, got {_what(kernel)}", hint)
    compile_gate(exercise, case, kernel, args)
    refuse_divergent_barriers(exercise, kernel, hint)
    try:
        with quiet_simulator():
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


MAX_THREADS = 1024  # the most threads a block may have, on every CUDA GPU so far: what a spec allows by default


def require_largest_block(exercise, cases, largest=None):
    """A check's cases must launch the largest block the kernel's spec allows: a shared or local array sized for
    the blocks the check happens to use passes otherwise. `largest` given (a spec that sizes memory by the block,
    or fixes the block): on either machine; else MAX_THREADS, on a GPU (`on_a_gpu`: in the simulator a block of
    1024 Python threads costs about a second per check, measured)."""
    if largest is None and course.SIMULATOR:
        return
    largest = MAX_THREADS if largest is None else largest
    if not any(_threads_per_block(c["block"]) == largest for c in cases):
        raise ValueError(f"{exercise}'s check has no case with a block of {largest} threads, the largest its spec "
                         "allows: add one")


def on_a_gpu(*cases):
    """The cases on a GPU, none in the simulator: `[..., *on_a_gpu(case), ...]` in a check's list of shapes."""
    return cases if not course.SIMULATOR else ()


def _threads_per_block(block):
    return prod(_dims(block))


def _arg_names(kernel, count):
    py = getattr(kernel, "py_func", kernel)
    try:
        names = list(inspect.signature(py).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[k] if k < len(names) else f"argument {k + 1}" for k in range(count)]


def run_cases(exercise, kernel, cases, hint, atol=0.0, rtol=0.0, diagnose=None, largest=None):
    """Run every case: dict(name, grid, block, inputs, expected) and report the first problem; return a summary.
    A case's optional `axes` names the output's dimensions in the messages (("thread", "acc index")).

    `inputs` are host arrays (copied to guarded device buffers) or scalars; `expected` is one host array or a
    tuple of them: the kernel's outputs, passed after the inputs, each NaN-filled and guarded. The cases must
    include sizes that are multiples of the block and sizes that are not (`unit`, if given, replaces the block
    as what sizes are multiples of). After each launch every input is compared with what it was. `largest`: the
    most threads a block may have under the kernel's spec (MAX_THREADS unless it fixes the block): some case must
    launch it (require_largest_block)."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    require_round_and_odd(exercise, cases)
    require_largest_block(exercise, cases, largest)
    for c in cases:
        _run_case(exercise, kernel, c, hint, atol, rtol, diagnose, ON_THIS_DEVICE)
    simulator_eyes(cases, lambda c, on: _run_case(exercise, kernel, c, hint, atol, rtol, diagnose, on),
                   lambda c: not is_round(c))
    shapes = sorted({str(c["block"]) for c in cases})
    return (f"{len(cases)} random cases (sizes that are and are not multiples of the block), "
            f"blocks {', '.join(shapes)}")


def _run_case(exercise, kernel, c, hint, atol, rtol, diagnose, on):
    """One case of run_cases, on `on` (ON_THIS_DEVICE, or the simulator on a GPU machine: simulator_eyes)."""
    __tracebackhide__ = True
    expected = c["expected"] if isinstance(c["expected"], tuple) else (c["expected"],)
    guard = max(max(_dims(c["block"])), 4)
    outs = [padded_output(e.shape, e.dtype, guard, on.to_device) for e in expected]
    args, inputs = [], {}
    for k, a in enumerate(c["inputs"]):
        a = np.asarray(a)
        if a.ndim == 0:
            args.append(a[()])
            continue
        inputs[k] = padded_input(a, guard, on.to_device)
        args.append(inputs[k].view)
    args += [out.view for out in outs]
    case = f"{on.where}with {c['name']}, grid={c['grid']}, block={c['block']}"
    on.launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
    check_inputs(exercise, case, inputs, _arg_names(kernel, len(args)), hint)
    for k, (out, e) in enumerate(zip(outs, expected)):
        which = f" (output {k + 1} of {len(expected)})" if len(expected) > 1 else ""
        got = out.guards(exercise, case + which, hint)
        compare(exercise, case + which, got, e, atol, rtol, hint, diagnose, axes=c.get("axes"))


def run_inplace_steps(exercise, kernel, cases, hint, atol=INPLACE_ATOL, rtol=INPLACE_RTOL, largest=None,
                      diagnose=None):
    """Run every case of an in-place update kernel for several steps and report the first problem.

    A case is dict(name, grid, block, names, state, steps): `state` are the host arrays updated in place
    (parameters first, then the optimizer's state, as named by `names`); each step is
    (gradient, scalars, expected state after the step), optionally followed by a slack per array: an absolute
    tolerance per element added to `atol` (a float32 error bound where the update cancels). The kernel is called as
    kernel(state[0], gradient, *state[1:], *scalars): parameters, gradient, state, hyperparameters. `hint` is a
    sentence, or a dict from an array's name to what to look at when that array is wrong (None: the rest).
    `largest` as in run_cases. `diagnose(name, got, expected, before)`, called when no element of the array was
    left unchanged, may return another hint for its wrong values (e.g. every element updated once, but by the
    wrong amount: the update's formula, not the loop), or None to keep `hint`."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    require_largest_block(exercise, cases, largest)
    unit = lambda c: c.get("unit", c["block"])  # noqa: E731
    if {all(a.size % unit(c) == 0 for a in c["state"]) for c in cases} != {True, False}:
        raise ValueError(f"{exercise}'s check needs sizes that are and are not multiples of the block")
    for c in cases:
        _run_inplace_case(exercise, kernel, c, hint, atol, rtol, ON_THIS_DEVICE, diagnose)
    simulator_eyes(cases, lambda c, on: _run_inplace_case(exercise, kernel, c, hint, atol, rtol, on, diagnose),
                   lambda c: not all(a.size % unit(c) == 0 for a in c["state"]))
    shapes = sorted({str(c["block"]) for c in cases})
    return (f"{len(cases)} random cases x {len(cases[0]['steps'])} steps (sizes that are and are not multiples "
            f"of the block), blocks {', '.join(shapes)}")



def _run_inplace_case(exercise, kernel, c, hint, atol, rtol, on, diagnose=None):
    """One case of run_inplace_steps, on `on` (as _run_case)."""
    __tracebackhide__ = True
    hints = dict(hint) if isinstance(hint, dict) else {None: hint}
    hint = hints[None]
    block = c["block"] if isinstance(c["block"], tuple) else (c["block"],)
    grid = c["grid"] if isinstance(c["grid"], tuple) else (c["grid"],)
    threads = prod(grid) * prod(block)  # guard cells cover every thread past the end, spare blocks too
    guard = max(max(block), 4, threads - min(a.size for a in c["state"]))
    bufs = [padded_inout(a, guard, on.to_device) for a in c["state"]]
    before = [np.asarray(a) for a in c["state"]]
    for k, (g, scalars, expected, *slack) in enumerate(c["steps"], 1):
        slack = slack[0] if slack else (0,) * len(bufs)
        case = f"{on.where}with {c['name']}, step {k} of {len(c['steps'])}, grid={c['grid']}, block={c['block']}"
        views = [p.view for p in bufs]
        grad = padded_input(g, guard, on.to_device)
        args = [views[0], grad.view, *views[1:], *scalars]
        on.launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
        for k in _state_first(len(bufs)):  # the state (m, v) before p: a wrong v is named v, not p
            p, name, e, prev = bufs[k], c["names"][k], expected[k], before[k]
            tol = atol + slack[k]
            where = f"{case} (array {name})"
            hint = hints.get(name, hints[None])
            got = p.guards(exercise, where, hint)
            stale = (got == prev) & ~np.isclose(e, prev, atol=tol, rtol=rtol)
            if stale.any():
                idx = tuple(int(i) for i in np.argwhere(stale)[0])
                fail(exercise, where, f"{name}{list(idx)} did not change in this step (it still holds "
                     f"{plain(prev[idx])}, expected {plain(e[idx])}): never written, or the update came out as zero? "
                     f"({stale.sum()} of {stale.size} elements unchanged)", hint)
            why = diagnose(name, got, e, prev) if diagnose else None
            compare(exercise, where, got, e, tol, rtol, why or hint)
        grad.unchanged(exercise, case, "g (the gradient)", hints[None])
        before = list(expected)


def _state_first(count):
    """The order in which an update kernel's arrays are compared: the optimizer's state, then the parameters."""
    return [*range(1, count), 0]


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


def refuse_divergent_barriers(exercise, kernel, hint):
    """Fail, naming the line, if a cuda.syncthreads() of the kernel is one that only some threads reach
    (divergent_barriers): the simulator's threads that skip it, or return, no longer count at the barrier, so the
    results come out right, and the executor refuses the saved kernel later."""
    __tracebackhide__ = True
    lines = divergent_barriers(kernel)
    if lines:
        fail(exercise, "(reading the kernel's code)", f"cuda.syncthreads() on line {', '.join(map(str, lines))} is "
             "inside an `if` (or a loop, or after a `return`) that depends on the thread: not every thread of the "
             "block reaches it, which is undefined behaviour on a GPU (a hang, or a result that is right by luck)",
             hint)


# --- the compile gate: what a GPU's compiler refuses, and float64 in float32 kernels, on either machine --------

GATE_ENV = "COURSE_COMPILE_GATE"  # "0" turns the gate off (to see what the simulator alone says)
_gate_answers = {}  # (the kernel's description, argument types) -> the compiler's answer: once per kernel
_gate_worker = None
COMPILE_HINT = ("a kernel is compiled for the GPU before it runs (the simulator runs it as Python, so it accepts "
                "more): inside a kernel use only scalar arithmetic, math.*, cuda.*, array indexing and "
                "np.float32(...) casts; no generator expressions or sum(), np.dot or other whole-array NumPy, "
                "try/except, lists or dicts; an `if` guard, not an exception, keeps an index in bounds")
FLOAT64_HINT = ("in numba a bare number (0.0, 1, 255) and float(...) are float64, and an operation that mixes a "
                "float32 with a float64 or an int (x / 255, 1 - beta) gives a float64, which a GPU computes many "
                "times slower and rounds differently: make each constant a float32 with np.float32(...), so that "
                "every operation has float32 operands")


def compile_gate(exercise, case, kernel, args):
    """Fail if `kernel` does not compile for a GPU with these arguments' types, with numba's reason and line, or
    if (every floating-point argument being float32) a statement computes in float64, naming the line. Compiled
    once per kernel source and argument types: in the simulator by a GPU-mode worker process (no GPU needed), on
    a GPU in this process. A kernel that cannot be described (a closure, ...) or a worker that cannot start goes
    without the gate."""
    __tracebackhide__ = True
    answer = _gate_answer(kernel, args)
    if answer is None or "skip" in answer:
        return
    err = answer["error"]
    if err:
        where = _gate_where(*((err["file"], err["line"]) if err["line"] else _line_naming(kernel, err["reason"])))
        fail(exercise, case, f"no GPU can compile your kernel, though the simulator runs it: numba says "
             f"\"{err['reason']}\"{where}", COMPILE_HINT)
    if answer["float64"] and _float32_only(args):
        (file, line, fn, made), *more = answer["float64"]
        others = sorted({m[1] for m in more if m[1] != line})
        lines = f"line{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}"
        where = _gate_where(file, line, fn).strip(' ()')
        if made:  # a bare number assigned to a variable: the float64 starts there, the arithmetic follows
            then = f", then at {lines}" if others else ""
            fail(exercise, case, f"your kernel computes in float64 though its arrays are float32, starting at "
                 f"{where} (a bare number makes the variable a float64){then}", FLOAT64_HINT)
        also = f" (and {lines})" if others else ""
        fail(exercise, case, f"your kernel computes in float64 though its arrays are float32: {where}{also}",
             FLOAT64_HINT)


def _gate_where(file, line, fn=None):
    """' (line 7 of kernel: `acc = acc + x`)' for a source position, or ''."""
    from course.runtime.gate import source_line
    if not line:
        return ""
    text = source_line(file, line) if file else ""
    return f" (line {line}{f' of {fn}' if fn else ''}{f': `{text}`' if text else ''})"


EXCEPT_RE = r"^\s*except\b"  # numba's `exception_match` is an `except` clause


def _line_naming(kernel, reason):
    """(file, line) of the first line of kernel's code, or of a device function it calls, that names what
    numba's reason names (`Function(<built-in function dot>)`, `attribute 'dot'`): numba did not say where."""
    from course.runtime.gate import called_device_functions
    names = [n for pair in re.findall(r"(?:function|intrinsic) (\w+)>|attribute '(\w+)'", reason) for n in pair if n]
    patterns = [EXCEPT_RE if n == "exception_match" else rf"\b{n}\s*\(" for n in names]
    for fn in [kernel, *called_device_functions(kernel)]:
        try:
            lines, first = inspect.getsourcelines(fn.py_func)
        except (OSError, TypeError):
            continue
        for k, line in enumerate(lines):
            if any(re.search(p, line) for p in patterns):
                return fn.py_func.__code__.co_filename, first + k
    return None, None


def _float32_only(args):
    """Whether no argument is float64 (an array's dtype or a scalar): then the spec asks for float32 throughout."""
    return not any(np.dtype(getattr(a, "dtype", type(a) if isinstance(a, float) else np.int64)) == np.float64
                   for a in args)


def _gate_answer(kernel, args):
    """The compiler's answer for kernel and args' types (cached), or None when the gate is off or cannot run."""
    from course.runtime import device
    from course.runtime import gate
    if os.environ.get(GATE_ENV, "1") == "0" or not hasattr(kernel, "py_func") or device.simulator_only():
        return None
    try:
        spec, argtypes = gate.describe(kernel), [gate.arg_type(a) for a in args]
        key = (json_key(spec), json_key(argtypes))
    except (gate.Untransportable, OSError, TypeError, ValueError, StopIteration):
        return None  # no source (typed at a prompt), or a global without a value form: no gate
    if key not in _gate_answers:
        _gate_answers[key] = _ask_compiler(kernel, spec, argtypes)
    return _gate_answers[key]


def json_key(x):
    """A hashable, canonical form of a JSON-able value."""
    import json
    return json.dumps(x, sort_keys=True)


def _ask_compiler(kernel, spec, argtypes):
    """Compile: in this process on a GPU, else in the worker (started on first use)."""
    global _gate_worker
    from course.runtime import gate
    if not course.SIMULATOR:
        return gate.analyse(kernel, gate.numba_types(argtypes))
    if _gate_worker is None:
        _gate_worker = gate.Worker()
    return _gate_worker.ask(spec, argtypes)


# --- sizes past the simulator's reach -------------------------------------------------------------

LARGEST_FLAT = 203_530  # floats in FlatParams of the course's largest MLP, 784-256-10 (each tensor 64-aligned)


@contextlib.contextmanager
def only_blocks(keep):
    """In the simulator, only the blocks whose blockIdx (a tuple) passes keep(...) run; the others are skipped, so
    a case of 400,000 threads costs what its few kept blocks cost (a check then expects the elements of the skipped
    blocks unchanged or unwritten). On a GPU every block runs. Used for one-thread-per-element kernels, whose
    elements a block owns are known: a guard or a size hard-coded below the course's sizes shows in the last block."""
    if not course.SIMULATOR:
        yield
        return
    from course.runtime import device
    device.patch_simulator()
    _, kernel = device.internals()
    real = kernel.BlockManager.run

    def run(self, grid_point, *args):
        if keep(tuple(int(b) for b in grid_point)):
            return real(self, grid_point, *args)

    kernel.BlockManager.run = run
    try:
        yield
    finally:
        kernel.BlockManager.run = real


def run_sampled(exercise, kernel, cases, hint, atol=0.0, rtol=0.0, diagnose=None):
    """Run cases too big for the simulator's threads, as run_cases does one case: a case's `keep(blockIdx)` (a
    tuple, x first) picks the only blocks the simulator runs (only_blocks), and the outputs the other blocks own
    (one thread per element: x over the last axis, y over the one before, unless the case's `thread_axes` says
    otherwise, e.g. (0,) for one thread per row) are expected unwritten there. On a GPU every block runs and
    every element is compared."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    for c in cases:
        keep = c.get("keep") or (lambda b: True)
        if course.SIMULATOR and "keep" in c:
            c = dict(c, expected=_owned_only(c, keep))
        with only_blocks(keep):
            _run_case(exercise, kernel, c, hint, atol, rtol, diagnose, ON_THIS_DEVICE)


def _owned_only(c, keep):
    """A case's expected outputs with NaN wherever the element's block (one thread per element) is not kept."""
    block = _dims(c["block"])
    out = []
    for e in (c["expected"] if isinstance(c["expected"], tuple) else (c["expected"],)):
        axes = c.get("thread_axes", (e.ndim - 1, e.ndim - 2)[:len(block)])  # the axes x (then y) walk
        idx = np.indices(e.shape)
        owners = zip(*(idx[a].ravel() // b for a, b in zip(axes, block)))
        mask = np.array([keep(o) for o in owners], bool).reshape(e.shape)
        out.append(np.where(mask, e, np.nan).astype(e.dtype))
    return tuple(out) if isinstance(c["expected"], tuple) else out[0]
