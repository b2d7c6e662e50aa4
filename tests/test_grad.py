"""course.grad: the float64 twins against finite differences (the independent oracle), and the kernels and
launcher against the twins at odd sizes."""
import numpy as np
import pytest
from numba import cuda

import course
from course import grad as G
from course.loss import softmax_xent_ref


def problem(rng, B, n_in, hidden, n_out=10, scale=0.5):
    X = rng.standard_normal((B, n_in))
    y = rng.integers(0, n_out, B)
    p = dict(W1=rng.standard_normal((n_in, hidden)) * scale, b1=rng.standard_normal(hidden) * 0.1,
             W2=rng.standard_normal((hidden, n_out)) * scale, b2=rng.standard_normal(n_out) * 0.1)
    return X, y, p


def numeric_grad(f, p, eps=1e-6):
    g = np.zeros_like(p)
    for i in np.ndindex(p.shape):
        old = p[i]
        p[i] = old + eps
        up = f()
        p[i] = old - eps
        down = f()
        p[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twin_gradients_match_finite_differences_float64(seed):
    rng = np.random.default_rng(seed)
    X, y, p = problem(rng, B=6, n_in=8, hidden=7)
    assert np.abs(X @ p["W1"] + p["b1"]).min() > 1e-4  # no pre-activation within eps of the ReLU kink
    analytic = G.mlp_grads_ref(X, y, **p)
    for name in p:
        numeric = numeric_grad(lambda: G.mlp_loss_ref(X, y, **p), p[name])
        # central differences in float64 with eps = 1e-6: truncation ~eps^2, rounding ~1e-16/eps ~1e-10
        np.testing.assert_allclose(analytic[name], numeric, rtol=1e-6, atol=1e-8, err_msg=name)


def test_forgetting_the_batch_mean_is_caught():
    rng = np.random.default_rng(3)
    X, y, p = problem(rng, B=5, n_in=6, hidden=4)
    numeric = numeric_grad(lambda: G.mlp_loss_ref(X, y, **p), p["W2"])
    buggy = G.mlp_grads_ref(X, y, **p)["W2"] * X.shape[0]  # dZ2 without / B scales every gradient by B
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(buggy, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("B, hidden", [(1, 3), pytest.param(13, 19, marks=pytest.mark.slow),
                                      pytest.param(course.pick(64, 7), course.pick(128, 17), marks=pytest.mark.slow)])
def test_mlp_backward_matches_twin(B, hidden):
    rng = np.random.default_rng(B * hidden)
    X = rng.random((B, 784), dtype=np.float32)
    y = rng.integers(0, 10, B)
    p = dict(W1=(rng.standard_normal((784, hidden)) * np.sqrt(2 / 784)).astype(np.float32),
             b1=(rng.standard_normal(hidden) * 0.1).astype(np.float32),
             W2=(rng.standard_normal((hidden, 10)) * np.sqrt(2 / hidden)).astype(np.float32),
             b2=(rng.standard_normal(10) * 0.1).astype(np.float32))
    H = np.maximum(X @ p["W1"] + p["b1"], 0).astype(np.float32)
    _, probs = softmax_xent_ref(H @ p["W2"] + p["b2"], y)
    grads = {k: cuda.device_array(v.shape, np.float32) for k, v in p.items()}
    work = {}
    for _ in range(2):  # the second call reuses the work buffers
        G.mlp_backward(cuda.to_device(X), cuda.to_device(y), cuda.to_device(H),
                       cuda.to_device(np.asarray(probs, np.float32)), cuda.to_device(p["W2"]), grads, work)
    ref = G.mlp_grads_ref(X, y, **p)
    for name in p:
        got = grads[name].copy_to_host()
        # float32 kernels vs the float64 twin: errors ~1e-7 relative to the largest entry
        np.testing.assert_allclose(got, ref[name], atol=1e-5 * max(np.abs(ref[name]).max(), 1e-3), rtol=0,
                                   err_msg=name)


@pytest.mark.parametrize("M, N", [(1, 1), (7, 33), (100, 10), (course.pick(5000, 300), 3)])
def test_column_sums(M, N):
    A = np.random.default_rng(M + N).standard_normal((M, N)).astype(np.float32)
    got = G.column_sums(cuda.to_device(A), cuda.device_array(N, np.float32)).copy_to_host()
    np.testing.assert_allclose(got, A.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5 * np.sqrt(M))


def test_launchers_refuse_bad_arguments():
    A = cuda.to_device(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        G.column_sums(A, cuda.device_array(4, np.float32))
    with pytest.raises(ValueError, match="shape"):
        G.matmul_tn(A, cuda.to_device(np.zeros((5, 2), np.float32)), cuda.device_array((3, 2), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        G.matmul_tn(A, cuda.to_device(np.zeros((4, 2))), cuda.device_array((3, 2), np.float32))
    grads = {k: cuda.device_array(s, np.float32) for k, s in
             dict(W1=(784, 5), b1=(5,), W2=(5, 10), b2=(10,)).items()}
    X, y = cuda.to_device(np.zeros((2, 784), np.float32)), cuda.to_device(np.zeros(2, np.int64))
    H, probs = cuda.to_device(np.zeros((2, 5), np.float32)), cuda.to_device(np.zeros((2, 10), np.float32))
    W2 = cuda.to_device(np.zeros((5, 10), np.float32))
    with pytest.raises(ValueError, match="y"):
        G.mlp_backward(X, cuda.to_device(np.zeros(3, np.int64)), H, probs, W2, grads)
    bad = dict(grads, b1=cuda.device_array(4, np.float32))
    with pytest.raises(ValueError, match="b1"):
        G.mlp_backward(X, y, H, probs, W2, bad)
