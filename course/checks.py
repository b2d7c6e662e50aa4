"""Exercise checks that a wrong kernel cannot fool: random inputs, odd sizes, several launch shapes,
NaN-filled outputs (unwritten elements show), and guard cells around them (out-of-bounds writes show)."""
import numpy as np
from numba import cuda

import course
from course.util import cdiv

GUARD_FLOAT = np.float32(-7.77e33)  # what guard cells hold; a kernel has no reason to write it
GUARD_INT = -987654321


class CheckFailure(AssertionError):
    """A check found a wrong answer; the message says where and hints why."""


def _fail(exercise, case, msg, hint):
    raise CheckFailure(f"{exercise} failed {case}:\n  {msg}\n  Hint: {hint}")


def raise_if_unimplemented(fn):
    """Raise the student's NotImplementedError before launching a kernel whose body is still a stub.

    Needed because on a real GPU a `raise` inside a kernel is compiled away instead of reaching Python."""
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is not None and "NotImplementedError" in code.co_names:
        msg = next((c for c in code.co_consts if isinstance(c, str) and c.startswith("Exercise")),
                   f"{py.__name__} is not implemented yet")
        raise NotImplementedError(msg)


def guarded(shape, dtype, guard):
    """A device buffer with `guard` cells on every side; returns (buffer, view of `shape` inside it).

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


def unwritten(got, dtype):
    """Boolean mask of elements still holding the 'unwritten' fill."""
    return np.isnan(got) if np.dtype(dtype).kind == "f" else got == GUARD_INT + 1


def compare(exercise, case, got, expected, atol, rtol, hint):
    """Fail on the first unwritten or wrong element, naming its index, expected and got."""
    bad = unwritten(got, expected.dtype) & ~unwritten(expected, expected.dtype)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        _fail(exercise, case, f"element {idx} was never written ({bad.sum()} of {bad.size} elements "
              "left unwritten)", hint)
    if expected.dtype.kind == "f":
        wrong = ~np.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    else:
        wrong = got != expected
    if wrong.any():
        idx = tuple(int(i) for i in np.argwhere(wrong)[0])
        _fail(exercise, case, f"element {idx}: expected {expected[idx]!r}, got {got[idx]!r} "
              f"({wrong.sum()} of {wrong.size} elements wrong)", hint)


def launch(exercise, case, kernel, grid, block, args, hint):
    """Launch and synchronise, turning a simulator out-of-bounds error into a check failure."""
    try:
        kernel[grid, block](*args)
        cuda.synchronize()
    except IndexError as e:  # the simulator checks bounds; a GPU does not (the guard cells catch it there)
        _fail(exercise, case, f"out-of-bounds access: {e}", hint)


def check_guards(exercise, case, full, guard, shape, hint):
    """Fail if any guard cell around the output changed."""
    inner = tuple(slice(guard, guard + n) for n in shape)
    mask = np.ones(full.shape, bool)
    mask[inner] = False
    fill = GUARD_FLOAT if full.dtype.kind == "f" else GUARD_INT
    touched = mask & (full != fill)
    if touched.any():
        pos = tuple(int(i) - guard for i in np.argwhere(touched)[0])
        _fail(exercise, case, f"wrote outside the output, at index {pos} of an array shaped {shape} "
              f"({touched.sum()} cells past the edges)", hint)


def run_cases(exercise, kernel, cases, hint, atol=0.0, rtol=0.0):
    """Run every case: dict(name, grid, block, inputs (host arrays), expected (host array))."""
    raise_if_unimplemented(kernel)
    for c in cases:
        expected = c["expected"]
        guard = max(max(c["block"]) if isinstance(c["block"], tuple) else c["block"], 4)
        full, out = guarded(expected.shape, expected.dtype, guard)
        args = [cuda.to_device(np.ascontiguousarray(a)) for a in c["inputs"]] + [out]
        case = f"with {c['name']}, grid={c['grid']}, block={c['block']}"
        launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
        full = full.copy_to_host()
        check_guards(exercise, case, full, guard, expected.shape, hint)
        inner = tuple(slice(guard, guard + n) for n in expected.shape)
        compare(exercise, case, full[inner], expected, atol, rtol, hint)
    shapes = sorted({str(c["block"]) for c in cases})
    print(f"✓ {exercise} passed: {len(cases)} random cases, blocks {', '.join(shapes)}")


# --- Notebook 01 -----------------------------------------------------------------------------------

def check_parse_idx_header(parse_idx_header, seed=0):
    """Exercise 1.1: random valid headers parse to (dtype, shape, offset); malformed ones raise ValueError."""
    raise_if_unimplemented(parse_idx_header)
    ex = "Exercise 1.1"
    rng = np.random.default_rng(seed)
    codes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    for trial in range(20):
        code = int(rng.choice(list(codes)))
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(s) for s in rng.integers(1, 70000 if ndim == 1 else 300, size=ndim))
        header = bytes([0, 0, code, ndim]) + b"".join(s.to_bytes(4, "big") for s in shape)
        case = f"a header {header.hex(' ')} + payload"
        got = parse_idx_header(header + bytes(rng.integers(0, 256, 8, dtype=np.uint8)))
        want = (np.dtype(codes[code]), shape, 4 + 4 * ndim)
        if not (isinstance(got, tuple) and len(got) == 3):
            _fail(ex, case, f"expected a tuple (dtype, shape, offset), got {got!r}",
                  "return all three: the numpy dtype, the shape as a tuple of ints, and the payload offset")
        if np.dtype(got[0]) != want[0]:
            _fail(ex, case, f"dtype: expected {want[0]!r}, got {got[0]!r}",
                  "byte 2 is the type code; IDX stores multi-byte numbers big-endian ('>')")
        if tuple(int(s) for s in got[1]) != want[1]:
            _fail(ex, case, f"shape: expected {want[1]}, got {tuple(got[1])}",
                  "byte 3 is the number of dimensions; each size is a 4-byte BIG-endian unsigned int")
        if int(got[2]) != want[2]:
            _fail(ex, case, f"offset: expected {want[2]}, got {got[2]}",
                  "the payload starts after the 4 magic bytes and 4 bytes per dimension")
    bad = {"a wrong magic (first two bytes not zero)": b"\x01\x00\x08\x01" + b"\x00\x00\x00\x05",
           "an unknown type code 0x07": b"\x00\x00\x07\x01" + b"\x00\x00\x00\x05",
           "zero dimensions": b"\x00\x00\x08\x00",
           "a header cut short (3 dims declared, 1 size present)": b"\x00\x00\x08\x03" + b"\x00\x00\x00\x05",
           "fewer than 4 bytes": b"\x00\x00"}
    for what, header in bad.items():
        try:
            parse_idx_header(header)
        except ValueError:
            continue
        except Exception as e:  # an IndexError or struct.error is exactly what a reader should not see
            _fail(ex, f"with {what}", f"raised {type(e).__name__}: {e}",
                  "check lengths and magic yourself and raise ValueError with a clear message")
        _fail(ex, f"with {what}", "no ValueError was raised", "validate before trusting the header")
    print(f"✓ {ex} passed: 20 random headers, {len(bad)} malformed ones rejected")


def check_scale_kernel(scale_kernel, seed=0):
    """Exercise 1.2: out[i] = x[i] / 255 for a flat uint8 x, over odd sizes and launch shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for n, block in ((course.pick(100_003, 1_003), 128), (course.pick(54_321, 517), 32), (7, 64)):
        x = rng.integers(0, 256, n, dtype=np.uint8)
        cases.append(dict(name=f"n={n}", grid=cdiv(n, block), block=block, inputs=[x],
                          expected=x.astype(np.float32) / np.float32(255)))
    run_cases("Exercise 1.2", scale_kernel, cases, atol=1e-7, rtol=1e-6,
              hint="one thread per element: i = cuda.grid(1); only write when i < out.size; "
                   "divide by 255 in float32")


def check_gather_kernel(gather_kernel, seed=0):
    """Exercise 1.3: out[r, c] = X[idx[r], c], 2-D grid (x over columns), odd sizes, several shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for (n, d, b), block in (((113, 45, 37), (16, 8)), ((61, 97, 29), (32, 4)), ((40, 7, 40), (8, 8))):
        X = rng.standard_normal((n, d)).astype(np.float32)
        idx = rng.permutation(n)[:b].astype(np.int64)
        grid = (cdiv(d, block[0]), cdiv(b, block[1]))
        cases.append(dict(name=f"X {X.shape}, batch of {b} rows", grid=grid, block=block,
                          inputs=[X, idx], expected=X[idx]))
    run_cases("Exercise 1.3", gather_kernel, cases,
              hint="c, r = cuda.grid(2) (x walks the columns, so neighbouring threads read neighbouring "
                   "memory); guard r < out.shape[0] and c < out.shape[1]; read X[idx[r], c]")
