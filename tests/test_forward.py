"""course.forward's launchers against their NumPy references at odd sizes, and their argument checks."""
import numpy as np
import pytest
from numba import cuda

import course
from course import forward as F

TOL = 1e-4  # float32, K <= 784 products of N(0, 1) values scaled as below: relative error ~1e-6, margin 100x


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (3, 17, 2), (17, 16, 33), (course.pick(65, 20), 100, 15)])
def test_matmul_matches_reference(version, M, K, N):
    rng = np.random.default_rng(M * K * N)
    A = (rng.standard_normal((M, K)) / np.sqrt(K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    got = F.matmul(cuda.to_device(A), cuda.to_device(B), version=version).copy_to_host()
    np.testing.assert_allclose(got, F.matmul_ref(A, B), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("B, K, N", [(5, 33, 7), (course.pick(64, 3), 784, course.pick(128, 18))])
def test_linear_matches_reference(relu, B, K, N):
    rng = np.random.default_rng(B + K + N)
    X = rng.random((B, K), dtype=np.float32)
    W = (rng.standard_normal((K, N)) * np.sqrt(2 / K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    got = F.linear(*(cuda.to_device(a) for a in (X, W, b)), relu=relu).copy_to_host()
    np.testing.assert_allclose(got, F.linear_ref(X, W, b, relu), atol=TOL, rtol=TOL)


def test_mlp_forward_matches_reference_and_reuses_buffers():
    rng = np.random.default_rng(7)
    B, hidden = 6, 19
    X = rng.random((B, 784), dtype=np.float32)
    W1 = (rng.standard_normal((784, hidden)) * 0.05).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32) * 0.1
    W2 = rng.standard_normal((hidden, 10)).astype(np.float32) * 0.3
    b2 = rng.standard_normal(10).astype(np.float32) * 0.1
    H_buf, logits_buf = cuda.device_array((B, hidden), np.float32), cuda.device_array((B, 10), np.float32)
    H, logits = F.mlp_forward(*(cuda.to_device(a) for a in (X, W1, b1, W2, b2)), H=H_buf, logits=logits_buf)
    assert H is H_buf and logits is logits_buf
    H_ref = F.linear_ref(X, W1, b1, relu=True)
    np.testing.assert_allclose(H.copy_to_host(), H_ref, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(logits.copy_to_host(), F.linear_ref(H_ref, W2, b2), atol=TOL, rtol=TOL)


def test_launchers_refuse_bad_arguments():
    A = cuda.to_device(np.zeros((4, 6), np.float32))
    B = cuda.to_device(np.zeros((6, 3), np.float32))
    b = cuda.to_device(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="shape"):
        F.matmul(A, cuda.to_device(np.zeros((5, 3), np.float32)))  # inner dimensions differ
    with pytest.raises(ValueError, match="version"):
        F.matmul(A, B, version="v9")
    with pytest.raises(ValueError, match="device array"):
        F.linear(np.zeros((4, 6), np.float32), B, b)
    with pytest.raises(ValueError, match="dtype"):
        F.linear(A, cuda.to_device(np.zeros((6, 3))), b)
    with pytest.raises(ValueError, match="shape"):
        F.linear(A, B, cuda.to_device(np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match="contiguous"):
        F.linear(A, cuda.to_device(np.zeros((6, 5), np.float32))[:, :3], b)  # a column slice: strided rows
    with pytest.raises(ValueError, match="shape"):
        F.linear(A, B, b, out=cuda.device_array((4, 4), np.float32))
