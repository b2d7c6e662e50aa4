"""Every exercise check passes the reference solution and rejects each planted wrong answer."""
import numpy as np
import pytest
from conftest import mutant, mutated, rejects
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


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----

def bug(id, says, *edits):
    return pytest.param(edits, says, id=id)


WRONG_CONSTANT = ("255.0", "256.0")


@pytest.mark.parametrize("edits, says", [
    bug("no bounds guard", ["outside the output", "out-of-bounds"], ("if i < out.size:", "if True:")),
    bug("off by one", ["outside the output", "out-of-bounds"], ("i < out.size", "i <= out.size")),
    bug("leaves the last element", ["never written"], ("i < out.size", "i < out.size - 1")),
    bug("/ 256", ["expected"], WRONG_CONSTANT),
    bug("integer division", ["expected"], ("x[i] / np.float32(255.0)", "x[i] // 255")),
    # forgets blockIdx: only the first block's worth of elements gets written
    bug("forgets blockIdx", ["never written"], ("cuda.grid(1)", "cuda.threadIdx.x")),
    # the threads past the end skip the barrier; the simulator's results came out right
    bug("a barrier only some threads reach", ["cuda.syncthreads() on line", "depends on the thread"],
        ("    if i < out.size:    # the last block", "    if i < out.size:\n        cuda.syncthreads()\n"
                                                    "    if i < out.size:    # the last block")),
    # off by one twice; NumPy's wrap of out[-1] made it right, the course refuses the index
    bug("indexes from -1", ["index -1 is negative"], ("i < out.size", "i <= out.size"),
        ("out[i] = x[i]", "out[i - 1] = x[i - 1]")),
])
def test_scale_check_rejects(edits, says):
    with pytest.raises(CheckFailure) as e:
        checks.check_scale_kernel(mutated(scale_kernel, *edits))
    msg = str(e.value)
    assert "Exercise 1.2" in msg and "Hint:" in msg
    assert any(s in msg for s in says), msg


@pytest.mark.parametrize("edits, says", [
    bug("no bounds guard", ["outside the output", "out-of-bounds"],
        ("if r < out.shape[0] and c < out.shape[1]:", "if True:")),
    bug("guards the rows only", ["outside the output", "out-of-bounds"], (" and c < out.shape[1]", "")),
    bug("transposed index", ["expected"], ("X[idx[r], c]", "X[idx[c % idx.shape[0]], r % X.shape[1]]")),
    # rows on x: covers the wrong extents with the check's non-square launches
    bug("axes swapped", ["never written"], ("c, r = cuda.grid(2)", "r, c = cuda.grid(2)")),
    bug("ignores idx", ["expected"], ("X[idx[r], c]", "X[r, c]")),
    bug("off by one in the columns", ["never written"], ("c < out.shape[1]", "c < out.shape[1] - 1")),
])
def test_gather_check_rejects(edits, says):
    with pytest.raises(CheckFailure) as e:
        checks.check_gather_kernel(mutated(gather_kernel, *edits))
    msg = str(e.value)
    assert "Exercise 1.3" in msg and "Hint:" in msg
    assert any(s in msg for s in says), msg


@pytest.mark.parametrize("edits", [
    pytest.param([('"big")', '"little")')], id="little endian"),
    pytest.param([("raise ValueError(", "ValueError(", 5)], id="no validation"),  # builds the errors, raises none
    pytest.param([("), shape, offset", "), shape, offset - 4")], id="offset forgets the magic"),  # 4 * ndim
    pytest.param([("np.dtype(IDX_TYPES[code])", "np.dtype(IDX_TYPES[code]).newbyteorder('<')")], id="native dtype"),
    # IndexError on a buffer shorter than 4 bytes, instead of a clear ValueError
    pytest.param([("    if len(buf) < 4:", "    buf[3]\n    if len(buf) < 4:")], id="IndexError on a short buffer"),
])
def test_header_check_rejects(edits):
    with pytest.raises(CheckFailure) as e:
        checks.check_parse_idx_header(mutated(parse_idx_header, *edits))
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
        checks.check_scale_kernel(mutant(scale_kernel, *WRONG_CONSTANT))
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
    # the edge cases the spec names: sizes are UNSIGNED (2**31 read signed comes back negative), a file of zero
    # items is valid, and the dtype is a NumPy dtype
    ('"big") for k', '"big", signed=True) for k', ["read as a SIGNED int"]),
    ("    return np.dtype(", "    if 0 in shape:\n        raise ValueError('empty')\n    return np.dtype(",
     ["your function raised ValueError: empty"]),
    ("return np.dtype(IDX_TYPES[code]), shape", "return IDX_TYPES[code], shape", ["expected the NumPy dtype"]),
    ("return np.dtype(IDX_TYPES[code]), shape", "return str(np.dtype(IDX_TYPES[code])), shape",
     ["expected the NumPy dtype"]),
])
def test_header_edge_cases_rejected(old, new, says):
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


# --- answers that fit only the notebook's inputs (sizes, values), planted before the check changed ---

ROWS_64 = ("r < out.shape[0]", "r < min(out.shape[0], 64)")  # a row guard hard-coded to the notebook's batch of 64


def test_hint_answer_of_1_1_is_code_that_passes_its_check(capsys):
    """hint("1.1", level=3) is the answer, runnable as written (it was pseudo-code)."""
    import textwrap
    names = {"np": np}
    exec(compile(textwrap.dedent(core.HINTS["1.1"]), "<hint 1.1>", "exec"), names)
    checks.check_parse_idx_header(names["parse_idx_header"])
    assert "1.1 passed" in capsys.readouterr().out


def test_gather_row_guard_hard_coded_to_the_batch_rejected():
    rejects(checks.check_gather_kernel, mutant(gather_kernel, *ROWS_64), "Exercise 1.3", ["never written"])


def test_checks_of_notebooks_01_to_05_state_their_domain():
    """each check's docstring lists the inputs it tries (sizes, values, calls, types)."""
    from conftest import registered_checks
    mine = {k: fn for k, (module, fn) in registered_checks().items()
            if module.__name__.rsplit(".", 1)[1] in ("data", "forward", "loss", "grad", "update")}
    assert len(mine) == 15
    for number, fn in mine.items():
        assert "Domain:" in (fn.__doc__ or ""), f"check {number}'s docstring does not list its domain"


@pytest.mark.parametrize("key", ["bytes(buf[:4])", "len(buf)"], ids=["by magic", "by length"])
def test_header_cached_across_calls_rejected(key):
    # the class "never called twice": the first result for a magic (or a length) comes back for every
    # later header that shares it; the check parses 24 headers in one process, many sharing both
    wrong = mutant(parse_idx_header, "    return np.dtype(IDX_TYPES[code]), shape, offset",
                   f"    return _CACHE.setdefault({key}, (np.dtype(IDX_TYPES[code]), shape, offset))",
                   scope={"_CACHE": {}})
    rejects(checks.check_parse_idx_header, wrong, "Exercise 1.1", ["expected"])
