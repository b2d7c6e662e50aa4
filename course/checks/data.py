"""Checks for notebook 01's exercises (IDX header, scaling kernel, gather kernel)."""
import numpy as np

import course
from course.checks.core import fail, passed, raise_if_unimplemented, run_cases
from course.util import cdiv

SIGNATURES = {  # for tests/test_compile.py: every kernel of notebook 01, as launchers and checks call it
    "course.scale:scale_kernel": ["uint8[::1], float32[::1]", "uint8[:], float32[:]"],
    "course.gather:gather_kernel": ["float32[:, ::1], int64[::1], float32[:, ::1]",
                                    "float32[:, ::1], int32[::1], float32[:, ::1]",
                                    "float32[:, :], int64[:], float32[:, :]"],
    "course.gather:gather1d_kernel": ["int64[::1], int64[::1], int64[::1]", "int32[::1], int32[::1], int32[::1]",
                                      "int64[::1], int32[::1], int64[::1]"],
}

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
            fail(ex, case, f"expected a tuple (dtype, shape, offset), got {got!r}",
                  "return all three: the numpy dtype, the shape as a tuple of ints, and the payload offset")
        if np.dtype(got[0]) != want[0]:
            fail(ex, case, f"dtype: expected {want[0]!r}, got {got[0]!r}",
                  "byte 2 is the type code; IDX stores multi-byte numbers big-endian ('>')")
        if tuple(int(s) for s in got[1]) != want[1]:
            fail(ex, case, f"shape: expected {want[1]}, got {tuple(got[1])}",
                  "byte 3 is the number of dimensions; each size is a 4-byte BIG-endian unsigned int")
        if int(got[2]) != want[2]:
            fail(ex, case, f"offset: expected {want[2]}, got {got[2]}",
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
            fail(ex, f"with {what}", f"raised {type(e).__name__}: {e}",
                  "check lengths and magic yourself and raise ValueError with a clear message")
        fail(ex, f"with {what}", "no ValueError was raised", "validate before trusting the header")
    passed(ex, parse_idx_header, f"20 random headers, {len(bad)} malformed ones rejected")


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
