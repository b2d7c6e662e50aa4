"""Notebook 07's exported functions against NumPy at odd sizes: the combine kernel and launcher, PCA directions,
the projection, filter normalization, and the grid evaluator against the float64 twin mlp_loss_ref.

Tolerances: combine is float32 (two products and two sums, possibly fused into FMAs on a GPU): atol 1e-6 +
rtol 1e-5 on N(0, 1) inputs. The evaluator sums float32 products and averages float32 losses: rtol 1e-4."""
from math import prod

import numpy as np
import pytest
from numba import cuda

from course import landscape as L
from course.grad import mlp_loss_ref
from course.update import FlatParams
from course.runtime.util import cdiv

TOL = dict(atol=1e-6, rtol=1e-5)
SHAPES = {"W1": (11, 5), "b1": (5,), "W2": (5, 10), "b2": (10,)}   # odd sizes: padding between the tensors


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- combine ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, block, spare", [(1, 32, 0), (97, 32, 0), (301, 128, 1)])
def test_combine_kernel_matches_reference(n, block, spare):
    rng = np.random.default_rng(n)
    theta, d1, d2 = randn(rng, n), randn(rng, n), randn(rng, n)
    a, b = np.float32(-0.61), np.float32(1.37)
    out = cuda.to_device(np.full(n, np.nan, np.float32))
    L.combine_kernel[cdiv(n, block) + spare, block](cuda.to_device(theta), cuda.to_device(d1), cuda.to_device(d2),
                                                    a, b, out)
    np.testing.assert_allclose(out.copy_to_host(), L.combine_ref(theta, d1, d2, a, b), **TOL)


@pytest.mark.parametrize("n", [1, 33, 300])  # launch shapes (1, 32), (1, 64), (2, 256)
def test_combine_launcher(n):
    rng = np.random.default_rng(10 + n)
    theta, d1, d2 = randn(rng, n), randn(rng, n), randn(rng, n)
    t_d = cuda.to_device(theta)
    out = L.combine(t_d, cuda.to_device(d1), cuda.to_device(d2), 0.3, -2.0)
    np.testing.assert_allclose(out.copy_to_host(), theta + 0.3 * d1 - 2.0 * d2, **TOL)
    np.testing.assert_array_equal(t_d.copy_to_host(), theta)          # the centre is not changed
    buf = cuda.device_array(n, np.float32)
    assert L.combine(t_d, cuda.to_device(d1), cuda.to_device(d2), 1, 0, out=buf) is buf


def test_combine_argument_errors():
    v = cuda.to_device(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="device array"):
        L.combine(np.zeros(5, np.float32), v, v, 1, 1)
    with pytest.raises(ValueError, match="dtype"):
        L.combine(cuda.to_device(np.zeros(5)), v, v, 1, 1)
    with pytest.raises(ValueError, match="shape"):
        L.combine(v, cuda.to_device(np.zeros(4, np.float32)), v, 1, 1)
    with pytest.raises(ValueError, match="contiguous"):
        L.combine(cuda.to_device(np.zeros(10, np.float32))[::2], v, v, 1, 1)
    with pytest.raises(ValueError, match="number"):
        L.combine(v, v, v, "a", 1)
    with pytest.raises(ValueError, match="finite"):
        L.combine(v, v, v, 1, float("nan"))
    with pytest.raises(ValueError, match="out"):
        L.combine(v, v, v, 1, 1, out=cuda.device_array(6, np.float32))


# --- directions and projections ------------------------------------------------------------------------

def test_pca_directions_orthonormal_ratios_and_signs():
    rng = np.random.default_rng(0)
    P, n = 37, 9
    S = np.cumsum(randn(rng, n + 1, P), axis=0)                         # (n + 1, P): a walk
    dirs, ratio = L.pca_directions(S)
    assert dirs.shape == (2, P) and dirs.dtype == np.float32 and ratio.shape == (2,)
    np.testing.assert_allclose(dirs.astype(np.float64) @ dirs.T, np.eye(2), atol=1e-6)
    assert np.all(ratio >= 0) and ratio[0] >= ratio[1] and ratio.sum() <= 1 + 1e-12
    M = S[:-1].astype(np.float64) - S[-1]
    s = np.linalg.svd(M, compute_uv=False)
    np.testing.assert_allclose(ratio, s[:2] ** 2 / np.sum(s ** 2), rtol=1e-10)   # NOT mean-centred
    assert np.all(M[0] @ dirs.T.astype(np.float64) >= 0)                 # theta_0 on the positive side


def test_pca_of_points_in_a_plane_explains_everything():
    rng = np.random.default_rng(1)
    P = 23
    u, v = randn(rng, P), randn(rng, P)
    end = randn(rng, P)
    S = np.array([end + a * u + b * v for a, b in rng.uniform(-1, 1, (6, 2))] + [end])
    dirs, ratio = L.pca_directions(S)
    assert ratio.sum() == pytest.approx(1.0, abs=1e-6)
    c = L.project_to_plane(S, end, *dirs)
    np.testing.assert_allclose(c @ dirs.astype(np.float64) + end, S, atol=1e-4)   # nothing off the plane


def test_pca_directions_argument_errors():
    with pytest.raises(ValueError, match="snapshots"):
        L.pca_directions(np.zeros((2, 5)))                               # only one difference: no plane
    with pytest.raises(ValueError, match="snapshots"):
        L.pca_directions(np.zeros(5))
    with pytest.raises(ValueError, match="span fewer"):
        L.pca_directions(np.ones((4, 5)))                                # all the same point


def test_project_to_plane_matches_least_squares():
    rng = np.random.default_rng(2)
    n, P = 7, 41
    S, theta_n = randn(rng, n, P), randn(rng, P) + 3
    d1, d2 = 2.5 * randn(rng, P), randn(rng, P)
    d2 += 0.5 * d1                                                       # not orthogonal, not unit length
    got = L.project_to_plane(S, theta_n, d1, d2)
    D = np.stack([d1, d2], axis=1).astype(np.float64)
    want = np.linalg.lstsq(D, (S.astype(np.float64) - theta_n).T, rcond=None)[0].T
    assert got.shape == (n, 2)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_random_direction_and_filter_normalize():
    params = FlatParams(SHAPES)
    layout = params.layout
    rng = np.random.default_rng(3)
    theta = np.zeros(params.size, np.float32)
    for _, s, o in layout:
        theta[o:o + prod(s)] = rng.standard_normal(prod(s))
    d = L.random_direction(layout, seed=5)
    assert d.shape == (params.size,) and d.dtype == np.float32
    np.testing.assert_array_equal(d, L.random_direction(layout, seed=5))          # seeded
    pad = np.ones(params.size, bool)
    for _, s, o in layout:
        pad[o:o + prod(s)] = False
    assert pad.any() and np.all(d[pad] == 0)
    d_before = d.copy()
    for ignore_bias in (True, False):
        r = L.filter_normalize(d, theta, layout, ignore_bias=ignore_bias)
        np.testing.assert_array_equal(d, d_before)                                 # input untouched
        assert np.all(r[pad] == 0)
        for name, s, o in layout:
            seg, th, dd = (v[o:o + prod(s)].reshape(s) for v in (r, theta, d))
            if len(s) == 1:
                np.testing.assert_array_equal(seg, 0 if ignore_bias else th)
            else:   # columns: the weights' column norms, and parallel to d's columns
                np.testing.assert_allclose(np.linalg.norm(seg, axis=0), np.linalg.norm(th, axis=0), rtol=1e-5)
                cos = np.sum(seg * dd, axis=0) / np.linalg.norm(seg, axis=0) / np.linalg.norm(dd, axis=0)
                np.testing.assert_allclose(cos, 1, rtol=1e-5)


def test_filter_normalize_argument_errors():
    layout = FlatParams(SHAPES).layout
    size = max(o + prod(s) for _, s, o in layout)
    with pytest.raises(ValueError, match="flat vectors"):
        L.filter_normalize(np.zeros(size - 1, np.float32), np.zeros(size, np.float32), layout)
    with pytest.raises(ValueError, match="layout"):
        L.random_direction([], seed=0)


# --- the grid evaluator --------------------------------------------------------------------------------

def _problem(rng, n=13, n_in=11):
    params = FlatParams(SHAPES)
    theta, d1, d2 = (np.zeros(params.size, np.float32) for _ in range(3))
    for _, s, o in params.layout:
        for v, scale in ((theta, 0.5), (d1, 0.2), (d2, 0.2)):
            v[o:o + prod(s)] = scale * rng.standard_normal(prod(s))
    X = rng.random((n, n_in), dtype=np.float32)
    y = rng.integers(0, 10, n)
    return params, X, y, theta, d1, d2


def _ref_loss(params, X, y, v):
    p = {k: v[o:o + prod(s)].reshape(s).astype(np.float64) for k, s, o in params.layout}
    return mlp_loss_ref(X.astype(np.float64), y, p["W1"], p["b1"], p["W2"], p["b2"])


def test_loss_at_and_surface_match_numpy_twin():
    rng = np.random.default_rng(4)
    params, X, y, theta, d1, d2 = _problem(rng)
    dev = [cuda.to_device(v) for v in (X, y, theta, d1, d2)]
    alphas, betas = np.array([-1.0, 0.5]), np.array([0.0, 2.0, -0.3])
    Z = L.loss_surface(dev[0], dev[1], params, dev[2], dev[3], dev[4], alphas, betas)
    assert Z.shape == (3, 2)
    for j, b in enumerate(betas):
        for i, a in enumerate(alphas):
            want = _ref_loss(params, X, y, L.combine_ref(theta, d1, d2, a, b))
            assert Z[j, i] == pytest.approx(want, rel=1e-4)
    np.testing.assert_array_equal(dev[2].copy_to_host(), theta)     # the centre is not changed


def test_loss_at_argument_errors():
    rng = np.random.default_rng(5)
    params, X, y, theta, d1, d2 = _problem(rng, n=3)
    X_d, y_d, t_d, a_d, b_d = (cuda.to_device(v) for v in (X, y, theta, d1, d2))
    ok = [[0.0, 0.0]]
    with pytest.raises(ValueError, match="FlatParams"):
        L.loss_at(X_d, y_d, {"W1": 1}, t_d, a_d, b_d, ok)
    with pytest.raises(ValueError, match="device array"):
        L.loss_at(X, y_d, params, t_d, a_d, b_d, ok)
    with pytest.raises(ValueError, match="features"):
        L.loss_at(cuda.to_device(np.zeros((3, 7), np.float32)), y_d, params, t_d, a_d, b_d, ok)
    with pytest.raises(ValueError, match="shape"):
        L.loss_at(X_d, y_d, params, cuda.to_device(theta[:-1]), a_d, b_d, ok)
    with pytest.raises(ValueError, match=r"\(K, 2\)"):
        L.loss_at(X_d, y_d, params, t_d, a_d, b_d, [0.0, 0.0])
    with pytest.raises(ValueError, match="finite"):
        L.loss_at(X_d, y_d, params, t_d, a_d, b_d, [[0.0, np.inf]])
    with pytest.raises(ValueError, match="non-empty"):
        L.loss_surface(X_d, y_d, params, t_d, a_d, b_d, [], [0.0])
