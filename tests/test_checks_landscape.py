"""Notebook 07's checks pass the solutions and reject each planted wrong answer."""
from math import prod

import numpy as np
import pytest
from conftest import rejects
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


# --- planted wrong answers for Exercise 7.1 (combine) ------------------------------------------------------

@cuda.jit
def combine_no_guard(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    out[i] = theta[i] + a * d1[i] + b * d2[i]


@cuda.jit
def combine_off_by_one(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i <= out.size:
        out[i] = theta[i] + a * d1[i] + b * d2[i]


@cuda.jit
def combine_swapped_coefficients(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = theta[i] + b * d1[i] + a * d2[i]


@cuda.jit
def combine_a_twice(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = theta[i] + a * d1[i] + a * d2[i]    # the wrong coefficient on the second direction


@cuda.jit
def combine_forgets_theta(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * d1[i] + b * d2[i]


@cuda.jit
def combine_minus(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = theta[i] + a * d1[i] - b * d2[i]


@cuda.jit
def combine_leaves_last(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size - 1:
        out[i] = theta[i] + a * d1[i] + b * d2[i]


@cuda.jit
def combine_block_only(theta, d1, d2, a, b, out):
    i = cuda.threadIdx.x                              # forgets blockIdx
    if i < out.size:
        out[i] = theta[i] + a * d1[i] + b * d2[i]


@cuda.jit
def combine_in_place(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < theta.size:
        theta[i] += a * d1[i] + b * d2[i]            # moves the centre; out is never written


@cuda.jit
def combine_reads_next(theta, d1, d2, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = theta[i] + a * d1[i + 1] + b * d2[i]


@pytest.mark.parametrize("kernel, says", [
    (combine_no_guard, OOB), (combine_off_by_one, OOB), (combine_swapped_coefficients, WRONG),
    (combine_a_twice, WRONG), (combine_forgets_theta, WRONG), (combine_minus, WRONG),
    (combine_leaves_last, NAN), (combine_block_only, NAN), (combine_in_place, ["wrote into its input theta"]),
    (combine_reads_next, WRONG + NAN + OOB),
])
def test_combine_check_rejects(kernel, says):
    rejects(checks.check_combine_kernel, kernel, "Exercise 7.1", says)


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

def _solve(R, d1, d2):
    D = np.stack([d1, d2], axis=1).astype(np.float64)
    return np.linalg.solve(D.T @ D, (R @ D).T).T


def project_not_centred(S, theta_n, d1, d2):
    return _solve(np.asarray(S, np.float64), d1, d2)                      # projects theta_i, not theta_i - theta_n


def project_dot_only(S, theta_n, d1, d2):
    R = np.asarray(S, np.float64) - theta_n
    return np.stack([R @ d1, R @ d2], axis=1)                            # right only for orthonormal directions


def project_each_direction_alone(S, theta_n, d1, d2):
    R = np.asarray(S, np.float64) - theta_n                              # unit-free, but ignores d1 . d2
    return np.stack([R @ d1 / (d1 @ d1), R @ d2 / (d2 @ d2)], axis=1)


def project_swapped(S, theta_n, d1, d2):
    return _solve(np.asarray(S, np.float64) - theta_n, d1, d2)[:, ::-1]


def project_centred_on_mean(S, theta_n, d1, d2):
    S = np.asarray(S, np.float64)
    return _solve(S - S.mean(axis=0), d1, d2)                            # sklearn-style centring


def project_transposed(S, theta_n, d1, d2):
    return _solve(np.asarray(S, np.float64) - theta_n, d1, d2).T          # (2, n)


def project_in_place(S, theta_n, d1, d2):
    S -= theta_n                                                         # changes the caller's snapshots
    return _solve(S.astype(np.float64), d1, d2)


@pytest.mark.parametrize("fn, says", [
    (project_not_centred, ["snapshots themselves"]), (project_dot_only, WRONG),
    (project_each_direction_alone, WRONG), (project_swapped, ["swapped"]), (project_centred_on_mean, WRONG),
    (project_transposed, ["shape"]), (project_in_place, ["changed"]),
])
def test_projection_check_rejects(fn, says):
    rejects(checks.check_project_to_plane, fn, "Exercise 7.2", says)


# --- planted wrong answers for Exercise 7.3 (filter normalization) -----------------------------------------

def _normalize(d, theta, layout, ignore_bias=True, axis=0, bias="rule", unit=False, per_layer=False, copy=True):
    out = np.zeros_like(d) if copy else d
    for _, shape, o in layout:
        n = prod(shape)
        if len(shape) == 1:
            if bias == "rule":
                out[o:o + n] = 0.0 if ignore_bias else theta[o:o + n]
            elif bias == "keep":
                out[o:o + n] = d[o:o + n]
            else:
                out[o:o + n] = bias
            continue
        dW, tW = d[o:o + n].reshape(shape), theta[o:o + n].reshape(shape)
        if per_layer:
            scale = np.linalg.norm(tW) / np.linalg.norm(dW)
        else:
            keep = dict(axis=axis, keepdims=True)
            scale = (1.0 if unit else np.linalg.norm(tW, **keep)) / (np.linalg.norm(dW, **keep) + 1e-10)
        out[o:o + n] = (dW * scale).ravel()
    return out


def normalize_rows(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, axis=1)               # PyTorch's (out, in) habit


def normalize_keeps_bias(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, bias="keep")          # forgets to zero the biases


def normalize_bias_always_zero(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, bias=0.0)             # ignores ignore_bias=False


def normalize_unit_columns(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, unit=True)            # forgets the weights' norm


def normalize_per_layer(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, per_layer=True)       # one scale for the whole matrix


def normalize_in_place(d, theta, layout, ignore_bias=True):
    return _normalize(d, theta, layout, ignore_bias, copy=False)           # overwrites the caller's d


def normalize_returns_theta(d, theta, layout, ignore_bias=True):
    out = _normalize(d, theta, layout, ignore_bias)
    for _, shape, o in layout:
        if len(shape) == 2:
            out[o:o + prod(shape)] = theta[o:o + prod(shape)]              # right norms, wrong direction
    return out


def normalize_keeps_padding(d, theta, layout, ignore_bias=True):
    out = _normalize(d, theta, layout, ignore_bias)
    end = max(o + prod(s) for _, s, o in layout)
    filled = np.zeros(end, bool)
    for _, s, o in layout:
        filled[o:o + prod(s)] = True
    out[~filled] = 1.0                                                     # garbage between the tensors
    return out


@pytest.mark.parametrize("fn, says", [
    (normalize_rows, ["ROWS"]), (normalize_keeps_bias, ["all zeros"]), (normalize_bias_always_zero, ["a copy"]),
    (normalize_unit_columns, ["unit columns"]), (normalize_per_layer, ["norm"]), (normalize_in_place, ["changed"]),
    (normalize_returns_theta, ["parallel"]), (normalize_keeps_padding, ["padding"]),
])
def test_filter_normalize_check_rejects(fn, says):
    rejects(checks.check_filter_normalize, fn, "Exercise 7.3", says)


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
    from conftest import mutant
    wrong = mutant(LS.project_to_plane, "np.float64", "np.float32", count=3)
    rejects(checks.check_project_to_plane, wrong, "Exercise 7.2", ["float64"])


def test_projection_that_centres_theta_n_in_place_rejected():
    from conftest import mutant
    wrong = mutant(LS.project_to_plane, "R = np.asarray(snapshots, np.float64) - np.asarray(theta_n, np.float64)",
                   "R = np.asarray(snapshots, np.float64) - np.asarray(theta_n, np.float64); d1 *= 1")
    wrong2 = mutant(LS.project_to_plane, "G = D.T @ D", "G = D.T @ D; d1 /= 2")
    rejects(checks.check_project_to_plane, wrong2, "Exercise 7.2", ["was changed"])
    checks.check_project_to_plane(wrong)  # multiplying by 1 changes nothing: it passes


def test_filter_normalize_returning_float64_rejected():
    from conftest import mutant
    wrong = mutant(LS.filter_normalize, "out = np.zeros_like(d)", "out = np.zeros_like(d, dtype=np.float64)")
    rejects(checks.check_filter_normalize, wrong, "Exercise 7.3", ["float32"])
