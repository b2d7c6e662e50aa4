"""Every exercise check passes the reference solution and rejects each planted wrong answer."""
import numpy as np
import pytest
from numba import cuda

from course.checks import data as checks
from course.checks import CheckFailure, core
from course.data import parse_idx_header
from course.gather import gather_kernel
from course.scale import scale_kernel


def test_solutions_pass():
    checks.check_parse_idx_header(parse_idx_header)
    checks.check_scale_kernel(scale_kernel)
    checks.check_gather_kernel(gather_kernel)


# --- planted wrong answers for Exercise 1.2 (scale) ---------------------------------------------------

@cuda.jit
def scale_no_guard(x, out):
    i = cuda.grid(1)
    out[i] = x[i] / np.float32(255.0)


@cuda.jit
def scale_off_by_one(x, out):
    i = cuda.grid(1)
    if i <= out.size:
        out[i] = x[i] / np.float32(255.0)


@cuda.jit
def scale_leaves_last(x, out):
    i = cuda.grid(1)
    if i < out.size - 1:
        out[i] = x[i] / np.float32(255.0)


@cuda.jit
def scale_wrong_constant(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] / np.float32(256.0)


@cuda.jit
def scale_integer_division(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] // 255


@cuda.jit
def scale_block_only(x, out):
    i = cuda.threadIdx.x  # forgets blockIdx: only the first block's worth of elements gets written
    if i < out.size:
        out[i] = x[i] / np.float32(255.0)


@pytest.mark.parametrize("kernel, says", [
    (scale_no_guard, ["outside the output", "out-of-bounds"]),
    (scale_off_by_one, ["outside the output", "out-of-bounds"]),
    (scale_leaves_last, ["never written"]),
    (scale_wrong_constant, ["expected"]),
    (scale_integer_division, ["expected"]),
    (scale_block_only, ["never written"]),
])
def test_scale_check_rejects(kernel, says):
    with pytest.raises(CheckFailure) as e:
        checks.check_scale_kernel(kernel)
    msg = str(e.value)
    assert "Exercise 1.2" in msg and "Hint:" in msg
    assert any(s in msg for s in says), msg


# --- planted wrong answers for Exercise 1.3 (gather) --------------------------------------------------

@cuda.jit
def gather_no_guard(X, idx, out):
    c, r = cuda.grid(2)
    out[r, c] = X[idx[r], c]


@cuda.jit
def gather_rows_guard_only(X, idx, out):
    c, r = cuda.grid(2)
    if r < out.shape[0]:
        out[r, c] = X[idx[r], c]


@cuda.jit
def gather_transposed_index(X, idx, out):
    c, r = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = X[idx[c % idx.shape[0]], r % X.shape[1]]


@cuda.jit
def gather_axes_swapped(X, idx, out):
    r, c = cuda.grid(2)  # rows on x: covers the wrong extents with the check's non-square launches
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = X[idx[r], c]


@cuda.jit
def gather_ignores_idx(X, idx, out):
    c, r = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = X[r, c]


@cuda.jit
def gather_off_by_one(X, idx, out):
    c, r = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1] - 1:
        out[r, c] = X[idx[r], c]


@pytest.mark.parametrize("kernel, says", [
    (gather_no_guard, ["outside the output", "out-of-bounds"]),
    (gather_rows_guard_only, ["outside the output", "out-of-bounds"]),
    (gather_transposed_index, ["expected"]),
    (gather_axes_swapped, ["never written"]),
    (gather_ignores_idx, ["expected"]),
    (gather_off_by_one, ["never written"]),
])
def test_gather_check_rejects(kernel, says):
    with pytest.raises(CheckFailure) as e:
        checks.check_gather_kernel(kernel)
    msg = str(e.value)
    assert "Exercise 1.3" in msg and "Hint:" in msg
    assert any(s in msg for s in says), msg


# --- planted wrong answers for Exercise 1.1 (IDX header) -----------------------------------------------

def header_little_endian(buf):
    dtype, shape, offset = parse_idx_header(buf)
    return dtype, tuple(int.from_bytes(buf[4 + 4 * k: 8 + 4 * k], "little") for k in range(len(shape))), offset


def header_no_validation(buf):
    ndim = buf[3] if len(buf) > 3 else 1
    shape = tuple(int.from_bytes(buf[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    return np.dtype({0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}.get(buf[2] if len(buf) > 2 else 8, ">u1")), shape, 4 + 4 * ndim


def header_wrong_offset(buf):
    dtype, shape, offset = parse_idx_header(buf)
    return dtype, shape, 4 * len(shape)


def header_native_dtype(buf):
    dtype, shape, offset = parse_idx_header(buf)
    return dtype.newbyteorder("<"), shape, offset


def header_index_error(buf):
    buf[3]  # IndexError on a buffer shorter than 4 bytes, instead of a clear ValueError
    return parse_idx_header(buf)


@pytest.mark.parametrize("fn", [header_little_endian, header_no_validation, header_wrong_offset,
                                header_native_dtype, header_index_error])
def test_header_check_rejects(fn):
    with pytest.raises(CheckFailure) as e:
        checks.check_parse_idx_header(fn)
    assert "Exercise 1.1" in str(e.value) and "Hint:" in str(e.value)


# --- the machinery itself ---------------------------------------------------------------------------

def test_unimplemented_stub_raises_the_exercise_message():
    @cuda.jit
    def stub(x, out):
        raise NotImplementedError("Exercise 1.2: scale uint8 pixels to float32 in [0, 1]")

    with pytest.raises(NotImplementedError, match="Exercise 1.2: scale"):
        checks.check_scale_kernel(stub)


def test_failure_names_first_wrong_index_expected_and_got():
    with pytest.raises(CheckFailure) as e:
        checks.check_scale_kernel(scale_wrong_constant)
    msg = str(e.value)
    assert "element (" in msg and "expected" in msg and "got" in msg and "grid=" in msg


def test_inputs_are_random_not_ramps():
    @cuda.jit
    def spy(x, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] / np.float32(255.0)

    per_check = {}
    original = checks.run_cases
    try:
        for check in (checks.check_scale_kernel, checks.check_gather_kernel):
            checks.run_cases = lambda ex, k, c, **kw: per_check.setdefault(ex, []).extend(c)
            check(spy)
    finally:
        checks.run_cases = original
    assert len(per_check) == 2
    for cases in per_check.values():
        for c in cases:
            for a in c["inputs"]:
                flat = np.asarray(a).ravel()
                if flat.size > 8 and a.dtype.kind == "f":
                    assert not np.all(np.diff(flat) == np.diff(flat)[0]), "arange-like input"
                    assert len(np.unique(flat)) > flat.size // 2, "constant-like input"
        # sizes that are not multiples of the block, and sizes that are (a kernel for full blocks only)
        assert {core.is_round(c) for c in cases} == {True, False}
        assert sum(not core.is_round(c) for c in cases) >= 3
    assert len({str(c["block"]) for cases in per_check.values() for c in cases}) >= 4  # several launch shapes


# --- Exercise 1.1's edge cases, planted as one-line mutations of the solution --------------------------

@pytest.mark.parametrize("old, new, says", [
    ("if len(buf) < offset:", "if len(buf) <= offset:", ["(the header alone, no payload)"]),  # wants a payload
    ("if len(buf) < 4:", "if 0 < len(buf) < 4:", ["empty buffer"]),                 # b'' reaches buf[0]
    ("if len(buf) < 4:", "if len(buf) in (2, 3):", ["one byte"]),                   # 1 byte reaches buf[1]
    ("if buf[0] != 0 or buf[1] != 0:", "if buf[0] != 0:", ["second byte not zero"]),  # magic half checked
    ('int.from_bytes(buf[4 + 4 * k: 8 + 4 * k], "big")', 'np.int64(int.from_bytes(buf[4 + 4 * k: 8 + 4 * k], "big"))',
     ["must be Python ints"]),
    ("offset = 4 + 4 * ndim", "offset = np.int64(4 + 4 * ndim)", ["must be Python ints"]),
    ("if ndim == 0:", "if ndim == 0 or ndim > 3:", ["your function raised ValueError"]),  # refuses a valid header
])
def test_header_edge_cases_rejected(old, new, says):
    from conftest import mutant, rejects
    msg = rejects(checks.check_parse_idx_header, mutant(parse_idx_header, old, new), "Exercise 1.1", says)
    assert "hint('1.1')" in msg


def test_header_solution_with_extra_validation_passes(capsys):
    def strict(buf):  # correct, and also refuses absurd sizes: a different but valid answer
        dtype, shape, offset = parse_idx_header(buf)
        if any(s > 2**31 for s in shape):
            raise ValueError("absurd size")
        return dtype, shape, offset

    checks.check_parse_idx_header(strict)
    assert "✓ Exercise 1.1 passed" in capsys.readouterr().out
