"""Checks for notebook 01's exercises (IDX header, scaling kernel, gather kernel)."""
import numpy as np

import course
from course.checks.core import MAX_THREADS, call, exercise, fail, on_a_gpu, run_cases
from course.runtime.util import cdiv


@exercise("1.1", nudges=(
    "The header is a 4-byte magic number, then one 4-byte size per dimension. Which byte of the magic says "
    "how many dimensions there are, and which one the element type?",
    "The sizes are big-endian UNSIGNED 32-bit integers: read as signed, a size of 2**31 or more comes back "
    "negative. The dtype is a NumPy dtype object, not a string. Before each read: is the buffer long enough? "
    "A size of 0 (a file of no items) is valid.",
), more="""\
  def parse_idx_header(buf):
      codes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
      if len(buf) < 4 or buf[0] != 0 or buf[1] != 0 or buf[2] not in codes or buf[3] == 0:
          raise ValueError(f"not an IDX header: magic {bytes(buf[:4]).hex()}")  # 00 00, a code, ndim >= 1
      ndim = buf[3]
      if len(buf) < 4 + 4 * ndim:
          raise ValueError(f"{ndim} dimensions need {4 + 4 * ndim} header bytes, got {len(buf)}")
      shape = tuple(int.from_bytes(buf[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim))  # unsigned: Python ints
      return np.dtype(codes[buf[2]]), shape, 4 + 4 * ndim  # a header with no payload byte after it is valid""")
def check_parse_idx_header(parse_idx_header, seed=0):
    """Exercise 1.1: random valid headers parse to (dtype, shape, offset); malformed ones raise ValueError.

    Domain: every type code of the spec, 1 to 4 dimensions, sizes from 0 to 2**31 (unsigned), with and without
    payload bytes, 20 calls with different headers in one process; malformed: a wrong magic (either byte), an
    unknown code, 0 dimensions, buffers cut short anywhere, b''. Types: a NumPy dtype, Python ints."""
    ex = "Exercise 1.1"
    rng = np.random.default_rng(seed)
    codes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    for trial in range(20):
        code = int(rng.choice(list(codes)))
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(s) for s in rng.integers(1, 70000 if ndim == 1 else 300, size=ndim))
        _check_header(ex, parse_idx_header, codes, code, shape, trial % 4 != 3, rng)  # every 4th: no payload
    for code, shape in EDGE_HEADERS:  # what the spec names: a size of 0, a size of 2**31 (unsigned)
        _check_header(ex, parse_idx_header, codes, code, shape, False, rng)
    bad = {"a wrong magic (first byte not zero)": b"\x01\x00\x08\x01" + b"\x00\x00\x00\x05",
           "a wrong magic (second byte not zero)": b"\x00\x01\x08\x01" + b"\x00\x00\x00\x05",
           "an unknown type code 0x07": b"\x00\x00\x07\x01" + b"\x00\x00\x00\x05",
           "zero dimensions": b"\x00\x00\x08\x00",
           "a header cut short (3 dims declared, 1 size present)": b"\x00\x00\x08\x03" + b"\x00\x00\x00\x05",
           "a size cut short (2 of its 4 bytes)": b"\x00\x00\x08\x01\x00\x00",
           "fewer than 4 bytes": b"\x00\x00",
           "one byte": b"\x00",
           "an empty buffer b''": b""}
    for what, header in bad.items():
        try:
            parse_idx_header(header)
        except ValueError:
            continue
        except Exception as e:  # an IndexError or struct.error is exactly what a reader should not see
            fail(ex, f"with {what}", f"raised {type(e).__name__}: {e}",
                  "check lengths and magic yourself and raise ValueError with a clear message")
        fail(ex, f"with {what}", "no ValueError was raised", "validate before trusting the header")
    return (f"20 random headers (5 without payload), {len(EDGE_HEADERS)} with a size of 0 or of 2**31, "
            f"{len(bad)} malformed ones rejected")


# (type code, shape): a file of zero items, and sizes that come back negative if unpacked as signed 32-bit ints
EDGE_HEADERS = [(0x08, (0,)), (0x08, (0, 28, 28)), (0x0C, (2**31,)), (0x0D, (3, 2**31))]


def _check_header(ex, parse_idx_header, codes, code, shape, payload, rng):
    """Parse one valid header (with a few payload bytes after it, or alone) and fail on any wrong part."""
    __tracebackhide__ = True
    ndim = len(shape)
    header = bytes([0, 0, code, ndim]) + b"".join(s.to_bytes(4, "big") for s in shape)
    case = f"a header {header.hex(' ')}" + (" + payload" if payload else " (the header alone, no payload)")
    buf = header + bytes(rng.integers(0, 256, 8, dtype=np.uint8)) if payload else header
    got = call(ex, f"with {case}", parse_idx_header, buf,
               hint="this header is valid (a size of 0 too: a file of no items): raise only for what the spec "
                    "calls malformed")
    want = (np.dtype(codes[code]), shape, 4 + 4 * ndim)
    if not (isinstance(got, tuple) and len(got) == 3):
        fail(ex, case, f"expected a tuple (dtype, shape, offset), got {got!r}",
             "return all three: the numpy dtype, the shape as a tuple of ints, and the payload offset")
    if not isinstance(got[0], np.dtype):
        fail(ex, case, f"dtype: expected the NumPy dtype {want[0]!r}, got the {type(got[0]).__name__} {got[0]!r}",
             "return a dtype object (np.dtype(...)): np.frombuffer and .astype take it, and == compares it")
    if got[0] != want[0]:
        fail(ex, case, f"dtype: expected {want[0]!r}, got {got[0]!r}",
             "byte 2 is the type code; IDX stores multi-byte numbers big-endian ('>')")
    if not isinstance(got[1], tuple) or tuple(int(s) for s in got[1]) != want[1]:
        negative = isinstance(got[1], tuple) and any(int(s) < 0 for s in got[1])
        fail(ex, case, f"shape: expected {want[1]}, got {got[1]!r}" + (
             ": a negative size is a size of 2**31 or more read as a SIGNED int" if negative else ""),
             "byte 3 is the number of dimensions; each size is a 4-byte BIG-endian UNSIGNED int; "
             "return the shape as a tuple")
    if not all(type(s) is int for s in got[1]) or type(got[2]) is not int:
        kinds = ", ".join(type(s).__name__ for s in (*got[1], got[2]))
        fail(ex, case, f"the sizes and offset must be Python ints, got {kinds}",
             "numpy integers overflow silently in products like rows * cols; convert with int(...)")
    if got[2] != want[2]:
        fail(ex, case, f"offset: expected {want[2]}, got {got[2]}",
             "the payload starts after the 4 magic bytes and 4 bytes per dimension")


@exercise("1.2", nudges=(
    "One thread per element: which element does this thread own, counted over every block of the grid, not "
    "only inside its own block?",
    "The grid has more threads than elements: what keeps the last block's spare threads from writing? And in "
    "which type is the division: in numba 255 is an int and 255.0 a float64, while out is float32.",
), more="""\
  i = cuda.grid(1)            # this thread's element
  if i < out.size:            # the last block has threads past the end
      out[i] = x[i] / np.float32(255.0)   # float32, not 255 (an int) or 255.0 (a float64)""")
def check_scale_kernel(scale_kernel, seed=0):
    """Exercise 1.2: out[i] = x[i] / 255 for a flat uint8 x, over odd and whole-block sizes and launch shapes.

    Domain: every uint8 value (0 and 255 included), sizes from 7 to 100,003 (1,003 in the simulator) and one of
    60,000 x 16 whole blocks, blocks of 32 to 1024 threads (1024 on a GPU only)."""
    rng = np.random.default_rng(seed)
    cases = []
    for n, block in ((course.pick(100_003, 1_003), 128), (course.pick(54_321, 517), 32), (7, 64),
                     *on_a_gpu((1_000, MAX_THREADS)),  # the largest block there is
                     (course.pick(60_000 * 16, 512), 256), (64, 32)):  # the last two: whole blocks only
        x = rng.integers(0, 256, n, dtype=np.uint8)
        cases.append(dict(name=f"n={n}", grid=cdiv(n, block), block=block, inputs=[x],
                          expected=x.astype(np.float32) / np.float32(255)))
    return run_cases("Exercise 1.2", scale_kernel, cases, atol=1e-7, rtol=1e-6,
                     hint="one thread per element, over every block of the grid (the global index); a guard for "
                          "the threads past the end that does not skip the last element; the division in float32")


@exercise("1.3", nudges=(
    "Row r of the output is the row of X that the batch picked for it: which number picks it, r or the index "
    "stored at position r?",
    "Two grid axes: which one walks the columns (x: neighbouring threads then read neighbouring memory)? "
    "Guard both of the output's dimensions.",
), more="""\
  c, r = cuda.grid(2)          # x walks the columns: neighbouring threads read neighbouring memory
  if r < out.shape[0] and c < out.shape[1]:
      out[r, c] = X[idx[r], c]""")
def check_gather_kernel(gather_kernel, seed=0):
    """Exercise 1.3: out[r, c] = X[idx[r], c], 2-D grid (x over columns), odd and whole-block sizes.

    Domain: X of N(0, 1) float32 (both signs), idx int64 rows of a permutation (as the course's batches are),
    batches of 8 to 300 rows (more than twice the notebook's 64: one tall, narrow case), 7 to 97 columns, blocks
    (8, 8) to (32, 32) (the largest on a GPU only), spare threads in x and in y."""
    rng = np.random.default_rng(seed)
    cases = []
    for (n, d, b), block in (((113, 45, 37), (16, 8)), ((61, 97, 29), (32, 4)), ((40, 7, 40), (8, 8)),
                             ((311, 2, 300), (2, 64)),  # a batch past twice the notebook's 64 rows, 2 columns
                             *on_a_gpu(((50, 21, 19), (32, 32))),  # the largest block there is
                             ((70, 32, 24), (16, 8)), ((50, 64, 8), (32, 4))):  # the last two: whole blocks
        X = rng.standard_normal((n, d)).astype(np.float32)
        idx = rng.permutation(n)[:b].astype(np.int64)
        grid = (cdiv(d, block[0]), cdiv(b, block[1]))
        cases.append(dict(name=f"X {X.shape}, batch of {b} rows", grid=grid, block=block,
                          inputs=[X, idx], expected=X[idx]))
    return run_cases("Exercise 1.3", gather_kernel, cases,
                     hint="look at which grid axis walks the columns (x) and which the rows (y), at the guard on "
                          "BOTH of out's dimensions, and at which row of X output row r comes from")
