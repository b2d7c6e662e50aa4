"""The machinery of exercise checks that a wrong kernel cannot fool: random inputs, odd sizes, several launch
shapes, NaN-filled outputs (unwritten elements show), guard cells around every array (out-of-bounds writes show,
and out-of-bounds reads stay inside memory the check owns, so a wrong kernel cannot crash the GPU context)."""
import numpy as np
from numba import cuda

import course

GUARD_FLOAT = np.float32(-7.77e33)  # what guard cells hold; a kernel has no reason to write it
GUARD_INT = -987654321


SIGNATURES = {"course.timing:hold_kernel": ["int64, float32[::1]"]}  # support kernels (tests/test_compile.py)


class CheckFailure(AssertionError):
    """A check found a wrong answer; the message says where and hints why."""


def fail(exercise, case, msg, hint):
    """Raise CheckFailure: which exercise, in which case, what is wrong, and a hint."""
    raise CheckFailure(f"{exercise} failed {case}:\n  {msg}\n  Hint: {hint}")


def raise_if_unimplemented(fn, _seen=None):
    """Raise the student's NotImplementedError before launching a kernel whose body (or a device function it
    calls) is still a stub. Needed because on a real GPU a `raise` inside a kernel never reaches Python."""
    _seen = set() if _seen is None else _seen
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is None or code in _seen:
        return
    _seen.add(code)
    if "NotImplementedError" in code.co_names:
        msg = next((c for c in code.co_consts if isinstance(c, str) and c.startswith("Exercise")),
                   f"{py.__name__} is not implemented yet")
        raise NotImplementedError(msg)
    for name in code.co_names:  # device functions the kernel calls
        callee = getattr(py, "__globals__", {}).get(name)
        if callee is not None and hasattr(callee, "py_func"):
            raise_if_unimplemented(callee, _seen)


def guarded(shape, dtype, guard):
    """An output: a device buffer with `guard` cells on every side; returns (buffer, view of `shape` inside it).

    The view is filled with NaN (floats) or a sentinel (ints) so that an element left unwritten shows;
    the cells around it hold GUARD_* so that a write past any edge shows, on a GPU as in the simulator."""
    shape = tuple(shape)
    dtype = np.dtype(dtype)
    full = tuple(n + 2 * guard for n in shape)
    fill_guard = GUARD_FLOAT if dtype.kind == "f" else GUARD_INT
    host = np.full(full, fill_guard, dtype=dtype)
    inner = tuple(slice(guard, guard + n) for n in shape)
    host[inner] = np.nan if dtype.kind == "f" else GUARD_INT + 1
    buf = cuda.to_device(host)
    return buf, buf[inner]


def guarded_input(a, guard):
    """An input: `a` on the device inside `guard` padding cells, returned as a view of a's shape.

    A kernel that reads past an edge gets the padding (NaN, which poisons whatever it touches, even a product
    with 0; or index 0 so that a gathered index stays valid) instead of faulting, and the check reports it."""
    a = np.asarray(a)
    if a.ndim == 0:
        return a[()]
    fill = np.nan if a.dtype.kind == "f" else 0
    host = np.full(tuple(n + 2 * guard for n in a.shape), fill, dtype=a.dtype)
    inner = tuple(slice(guard, guard + n) for n in a.shape)
    host[inner] = a
    return cuda.to_device(host)[inner]


def unwritten(got, dtype):
    """Boolean mask of elements still holding the 'unwritten' fill."""
    return np.isnan(got) if np.dtype(dtype).kind == "f" else got == GUARD_INT + 1


def compare(exercise, case, got, expected, atol, rtol, hint):
    """Fail on the first unwritten or wrong element, naming its index, expected and got."""
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
        fail(exercise, case, f"element {idx}: expected {expected[idx]!r}, got {got[idx]!r} "
              f"({wrong.sum()} of {wrong.size} elements wrong)", hint)


def settle_simulator(kernel, timeout=30.0):
    """After a simulated kernel raised: wait for its threads and restore `cuda` (course.device.settle_simulator)."""
    from course.device import settle_simulator
    settle_simulator(kernel, timeout)


def launch(exercise, case, kernel, grid, block, args, hint):
    """Launch and synchronise, turning an out-of-bounds access or a GPU fault into a check failure."""
    try:
        kernel[grid, block](*args)
        cuda.synchronize()
    except Exception as e:
        if course.SIMULATOR:
            settle_simulator(kernel)
            if isinstance(e, IndexError):  # the simulator checks bounds; a GPU does not (guard cells catch it)
                fail(exercise, case, f"out-of-bounds access: {e}", hint)
        elif "Cuda" in type(e).__name__:
            fail(exercise, case, f"the GPU reported {type(e).__name__}: {e}",
                 f"{hint}. A thread read or wrote far outside its arrays, and this CUDA context is now unusable: "
                 "restart the kernel (Kernel > Restart) before running anything else")
        raise


def check_guards(exercise, case, full, guard, shape, hint):
    """Fail if any guard cell around the output changed."""
    inner = tuple(slice(guard, guard + n) for n in shape)
    mask = np.ones(full.shape, bool)
    mask[inner] = False
    fill = GUARD_FLOAT if full.dtype.kind == "f" else GUARD_INT
    touched = mask & (full != fill)
    if touched.any():
        pos = tuple(int(i) - guard for i in np.argwhere(touched)[0])
        fail(exercise, case, f"wrote outside the output, at index {pos} of an array shaped {shape} "
              f"({touched.sum()} cells past the edges)", hint)


def run_cases(exercise, kernel, cases, hint, atol=0.0, rtol=0.0):
    """Run every case: dict(name, grid, block, inputs, expected) and report the first problem.

    `inputs` are host arrays (copied to guarded device buffers) or scalars; `expected` is one host array or a
    tuple of them: the kernel's outputs, passed after the inputs, each NaN-filled and guarded."""
    raise_if_unimplemented(kernel)
    for c in cases:
        expected = c["expected"] if isinstance(c["expected"], tuple) else (c["expected"],)
        block = c["block"] if isinstance(c["block"], tuple) else (c["block"],)
        guard = max(max(block), 4)
        outs = [guarded(e.shape, e.dtype, guard) for e in expected]
        args = [guarded_input(a, guard) for a in c["inputs"]] + [view for _, view in outs]
        case = f"with {c['name']}, grid={c['grid']}, block={c['block']}"
        launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
        for k, ((full, _), e) in enumerate(zip(outs, expected)):
            which = f" (output {k + 1} of {len(expected)})" if len(expected) > 1 else ""
            full = full.copy_to_host()
            check_guards(exercise, case + which, full, guard, e.shape, hint)
            inner = tuple(slice(guard, guard + n) for n in e.shape)
            compare(exercise, case + which, full[inner], e, atol, rtol, hint)
    shapes = sorted({str(c["block"]) for c in cases})
    print(f"✓ {exercise} passed: {len(cases)} random cases, blocks {', '.join(shapes)}")
