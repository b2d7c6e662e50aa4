"""Notebook 07's checks pass the solutions and reject each planted wrong answer."""
import numpy as np
import pytest
from conftest import mutant, mutated, rejects
from numba import cuda

from course import landscape as LS
from course.checks import landscape as checks
from course.landscape import combine_kernel, filter_normalize, project_to_plane


def test_solutions_pass():
    checks.check_combine_kernel(combine_kernel)
    checks.check_project_to_plane(project_to_plane)
    checks.check_filter_normalize(filter_normalize)



OOB = ["outside the output", "out-of-bounds"]  # a GPU writes into the guard cells; the simulator raises
NAN = ["NaN", "never written"]
WRONG = ["expected"]


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----

def bug(id, says, *edits):
    return pytest.param(edits, says, id=id)


@pytest.mark.parametrize("edits, says", [
    bug("no bounds guard", OOB, ("if i < out.size:", "if True:")),
    bug("off by one", OOB, ("i < out.size", "i <= out.size")),
    bug("swapped coefficients", WRONG, ("a * d1[i] + b * d2[i]", "b * d1[i] + a * d2[i]")),
    bug("a twice", WRONG, ("b * d2[i]", "a * d2[i]")),  # the wrong coefficient on the second direction
    bug("forgets theta", WRONG, ("theta[i] + a", "a")),
    bug("minus b d2", WRONG, ("+ b * d2[i]", "- b * d2[i]")),
    bug("leaves the last element", NAN, ("i < out.size", "i < out.size - 1")),
    bug("forgets blockIdx", NAN, ("cuda.grid(1)", "cuda.threadIdx.x")),
    # moves the centre; out is never written
    bug("in place into theta", ["wrote into its input theta"], ("out[i] = theta[i] + a", "theta[i] += a")),
    bug("reads the next d1", WRONG + NAN + OOB, ("d1[i]", "d1[i + 1]")),
])
def test_combine_check_rejects(edits, says):
    rejects(checks.check_combine_kernel, mutated(combine_kernel, *edits), "Exercise 7.1", says)


def test_combine_cases_are_random_odd_and_varied():
    cases = []
    original = checks.run_cases
    try:
        checks.run_cases = lambda ex, k, c, **kw: cases.extend(c)
        checks.check_combine_kernel(combine_kernel)
    finally:
        checks.run_cases = original
    assert len({c["block"] for c in cases}) >= 2
    assert any(c["grid"] * c["block"] - c["inputs"][0].size >= c["block"] for c in cases)   # a spare block
    assert sum(c["inputs"][0].size % c["block"] != 0 for c in cases) >= 3       # odd sizes
    assert any(c["inputs"][0].size % c["block"] == 0 for c in cases)             # and whole blocks
    for c in cases:
        theta, d1, d2, a, b = c["inputs"]
        assert isinstance(a, np.float32) and isinstance(b, np.float32) and abs(abs(a) - abs(b)) >= 0.2
        if theta.size > 8:
            assert len(np.unique(theta)) > theta.size // 2 and not np.array_equal(d1, d2)


# --- planted wrong answers for Exercise 7.2 (projection) ---------------------------------------------------

CENTRE = "R = np.asarray(snapshots, np.float64) - np.asarray(theta_n, np.float64)"
SOLVE = "(R @ D).T).T"


@pytest.mark.parametrize("edits, says", [
    bug("not centred", ["snapshots themselves"], (" - np.asarray(theta_n, np.float64)", "")),  # projects theta_i
    # right only for orthonormal directions
    bug("dot products only", WRONG, ("np.linalg.solve(G, (R @ D).T).T", "R @ D")),
    bug("each direction alone", WRONG, ("G = D.T @ D", "G = np.diag(np.diag(D.T @ D))")),  # ignores d1 . d2
    bug("swapped", ["swapped"], (SOLVE, SOLVE + "[:, ::-1]")),
    bug("centred on the mean", WRONG,  # sklearn-style centring
        ("- np.asarray(theta_n, np.float64)", "- np.asarray(snapshots, np.float64).mean(axis=0)")),
    bug("transposed (2, n)", ["shape"], (SOLVE, "(R @ D).T)")),
    bug("centres the caller's snapshots in place", ["changed"],
        (CENTRE, "snapshots -= theta_n; R = np.asarray(snapshots, np.float64)")),
])
def test_projection_check_rejects(edits, says):
    rejects(checks.check_project_to_plane, mutated(project_to_plane, *edits), "Exercise 7.2", says)


# --- planted wrong answers for Exercise 7.3 (filter normalization) -----------------------------------------

BIAS = "0.0 if ignore_bias else theta[o:o + n]"


@pytest.mark.parametrize("edits, says", [
    bug("normalizes rows", ["ROWS"], ("axis=0)", "axis=1, keepdims=True)", 2)),  # PyTorch's (out, in) habit
    bug("keeps the bias", ["all zeros"], (BIAS, "d[o:o + n]")),                   # forgets to zero the biases
    bug("bias always zero", ["a copy"], (BIAS, "0.0")),                           # ignores ignore_bias=False
    bug("unit columns", ["unit columns"], ("np.linalg.norm(tW, axis=0)", "1.0")),  # forgets the weights' norm
    bug("one scale per layer", ["norm"], ("axis=0", "axis=None", 2)),            # one scale for the whole matrix
    bug("in place", ["changed"], ("out = np.zeros_like(d)", "out = d")),          # overwrites the caller's d
    bug("returns theta", ["parallel"], ("(dW * scale).ravel()", "tW.ravel()")),   # right norms, wrong direction
    bug("garbage in the padding", ["padding"], ("out = np.zeros_like(d)", "out = np.ones_like(d)")),
])
def test_filter_normalize_check_rejects(edits, says):
    rejects(checks.check_filter_normalize, mutated(filter_normalize, *edits), "Exercise 7.3", says)


# --- the machinery ------------------------------------------------------------------------------------

def test_unimplemented_stubs_raise_the_exercise_message():
    @cuda.jit
    def stub(theta, d1, d2, a, b, out):
        raise NotImplementedError("Exercise 7.1: the combine kernel")

    def stub2(S, theta_n, d1, d2):
        raise NotImplementedError("Exercise 7.2: the projection onto the plane")

    def stub3(d, theta, layout, ignore_bias=True):
        raise NotImplementedError("Exercise 7.3: filter normalization")

    for check, fn, label in ((checks.check_combine_kernel, stub, "Exercise 7.1"),
                             (checks.check_project_to_plane, stub2, "Exercise 7.2"),
                             (checks.check_filter_normalize, stub3, "Exercise 7.3")):
        with pytest.raises(NotImplementedError, match=label):
            check(fn)


# --- dtypes the specs state, and inputs left alone: one-line mutations of the solutions ---------------------

def test_projection_in_float32_rejected():
    wrong = mutant(LS.project_to_plane, "np.float64", "np.float32", count=3)
    rejects(checks.check_project_to_plane, wrong, "Exercise 7.2", ["float64"])


def test_projection_that_centres_theta_n_in_place_rejected():
    wrong = mutant(LS.project_to_plane, "R = np.asarray(snapshots, np.float64) - np.asarray(theta_n, np.float64)",
                   "R = np.asarray(snapshots, np.float64) - np.asarray(theta_n, np.float64); d1 *= 1")
    wrong2 = mutant(LS.project_to_plane, "G = D.T @ D", "G = D.T @ D; d1 /= 2")
    rejects(checks.check_project_to_plane, wrong2, "Exercise 7.2", ["was changed"])
    checks.check_project_to_plane(wrong)  # multiplying by 1 changes nothing: it passes


def test_filter_normalize_returning_float64_rejected():
    wrong = mutant(LS.filter_normalize, "out = np.zeros_like(d)", "out = np.zeros_like(d, dtype=np.float64)")
    rejects(checks.check_filter_normalize, wrong, "Exercise 7.3", ["float32"])


# --- the domain the course feeds them (a grid's a = 0 and b = 0 lines, FlatParams' padding, a zero
# column) -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edits", [
    pytest.param([("theta[i] + a * d1[i] + b * d2[i]", "theta[i] + a * (d1[i] + (b / a) * d2[i])")],
                 id="divides by a"),     # every plot grid crosses a = 0
    pytest.param([("theta[i] + a * d1[i] + b * d2[i]", "theta[i] + b * (d2[i] + (a / b) * d1[i])")],
                 id="divides by b"),
])
def test_combine_check_tries_a_zero_coefficient(edits):
    rejects(checks.check_combine_kernel, mutated(combine_kernel, *edits), "Exercise 7.1", WRONG + NAN)


@pytest.mark.parametrize("edits, says", [
    bug("copies d's padding", ["padding"], ("out = np.zeros_like(d)", "out = d.copy()")),
    bug("copies theta's padding", ["padding"], ("out = np.zeros_like(d)", "out = theta.copy()")),
    bug("no epsilon", ["NaN", "zero column", "expected"], (" + 1e-10)", ")")),   # 0 / 0 on an all-zero column
])
def test_filter_normalize_check_covers_the_real_domain(edits, says):
    rejects(checks.check_filter_normalize, mutated(filter_normalize, *edits), "Exercise 7.3", says)
