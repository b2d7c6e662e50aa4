"""Notebooks 15 (the appendix) and 10: the course.matmul and course.merged launchers (the register-blocked matmuls, the fused loss and gradient kernels, the
merged step) against NumPy, in the simulator (moved here from tests/test_fused.py, which checks course.fused).

float32 tolerances: sums of <= 40 products of N(0, 1) values in another order than NumPy: 1e-4 relative."""
import numpy as np
import pytest

from course.train import init_params

SEED, HIDDEN, BATCH, LR = 3, 8, 8, 0.1


def test_matmul_v3_matches_numpy_at_odd_sizes():
    from numba import cuda
    from course.matmul import matmul_v3
    rng = np.random.default_rng(0)
    for M, K, N in [(1, 1, 1), (129, 9, 3), (5, 17, 130)]:
        A, B = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
        np.testing.assert_allclose(matmul_v3(cuda.to_device(A), cuda.to_device(B)).copy_to_host(), A @ B,
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        matmul_v3(cuda.to_device(A), cuda.to_device(A))
    with pytest.raises(ValueError, match="device array"):
        matmul_v3(A, cuda.to_device(B))


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_matmul_v4_v5_match_numpy_at_odd_sizes(version):
    """Several tiles along K (K = 17, 20: both shared buffers in turn, the last tile partly zero), partial row and
    column tiles (v5: rows and columns in both halves of its quadrants, 68 and 70 > HALF_M)."""
    from numba import cuda
    from course import matmul as ladder
    matmul = getattr(ladder, f"matmul_{version}")
    rng = np.random.default_rng(1)
    for M, K, N in [(1, 1, 1), (129, 17, 3), (5, 20, 130), (68, 9, 70)]:
        A, B = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
        np.testing.assert_allclose(matmul(cuda.to_device(A), cuda.to_device(B)).copy_to_host(), A @ B,
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        matmul(cuda.to_device(A), cuda.to_device(A))


@pytest.mark.parametrize("B,C", [(1, 10), (37, 10), (300, 3)])
def test_softmax_xent_grad_matches_the_reference(B, C):
    from numba import cuda
    from course.loss import softmax_xent_ref
    from course.merged import softmax_xent_grad
    rng = np.random.default_rng(B)
    logits = (rng.standard_normal((B, C)) * 5).astype(np.float32)
    y = rng.integers(0, C, B)
    dZ, loss = cuda.device_array((B, C), np.float32), cuda.device_array(1, np.float32)
    softmax_xent_grad(cuda.to_device(logits), cuda.to_device(y), dZ, loss)
    want_loss, probs = softmax_xent_ref(logits, y)
    np.testing.assert_allclose(loss.copy_to_host()[0], want_loss, rtol=1e-5)
    np.testing.assert_allclose(dZ.copy_to_host(), (probs - np.eye(C)[y]) / B, atol=1e-6)
    with pytest.raises(ValueError, match="y"):
        softmax_xent_grad(cuda.to_device(logits), cuda.to_device(y[:-1] if B > 1 else y[:0]), dZ, loss)


def test_grad_wb_matches_the_reference():
    from numba import cuda
    from course.merged import grad_wb
    rng = np.random.default_rng(0)
    A, dZ = rng.standard_normal((13, 21)).astype(np.float32), rng.standard_normal((13, 17)).astype(np.float32)
    dW, db = cuda.device_array((21, 17), np.float32), cuda.device_array(17, np.float32)
    grad_wb(cuda.to_device(A), cuda.to_device(dZ), dW, db)
    np.testing.assert_allclose(dW.copy_to_host(), A.T @ dZ, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db.copy_to_host(), dZ.sum(0), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="dW"):
        grad_wb(cuda.to_device(A), cuda.to_device(dZ), cuda.device_array((17, 21), np.float32), db)


@pytest.mark.slow
def test_merged_step_equals_the_plain_step(data):
    from numba import cuda
    from course.merged import train_step_9
    from course.train import buffers, train_step
    from course.update import SGD
    X, y = data[0][:BATCH], data[1][:BATCH]
    out = []
    for step in (train_step, train_step_9):
        p = init_params(HIDDEN, SEED, n_in=X.shape[1])
        g, o, buf = p.zeros_like(), SGD(p, LR), buffers(BATCH, HIDDEN)
        extra = () if step is train_step else (cuda.device_array((BATCH, 10), np.float32),
                                               cuda.device_array((BATCH, HIDDEN), np.float32))
        loss = step(cuda.to_device(X), cuda.to_device(y), p, g, o, buf, *extra)
        out.append((loss.copy_to_host()[0], p.flat.copy_to_host()))
    assert abs(out[0][0] - out[1][0]) < 1e-5
    np.testing.assert_allclose(out[0][1], out[1][1], atol=1e-6)
