"""The fused training loop (course.fused) against notebook 06's loop and the NumPy twin, in the simulator.

Tiny sizes: 7x7-pooled inputs (49 pixels), hidden 8, batch 8, three steps. Tolerances: float32 sums of at most
49 products, accumulated in another order than the reference (lanes, atomics): 1e-5 absolute on parameters of
size ~0.1, 1e-5 on losses of size ~2."""
import numpy as np
import pytest

import course
from course.data import load_mnist
from course.fused import FusedTrainer, fit_fused, sgd_epoch_ref
from course.train import fit, init_params, pool

SEED, HIDDEN, BATCH, STEPS, LR = 3, 8, 8, 3, 0.1


@pytest.fixture(scope="module")
def data():
    X, y, Xt, yt = load_mnist(None)
    return pool(X[:BATCH * STEPS + 5], 4), y[:BATCH * STEPS + 5], pool(Xt[:16], 4), yt[:16]  # 5 left over


@pytest.fixture(scope="module")
def plain(data):
    """course.train.fit, SGD, one epoch of STEPS steps, the loss logged at every step."""
    return fit(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, log_every=1, progress=False)


def _same(hist, plain, atol=1e-5):
    assert len(hist["loss"]) == len(plain["loss"]) == STEPS
    np.testing.assert_allclose(hist["loss"], plain["loss"], atol=atol, rtol=0)
    want, got = plain["params"].to_host(), hist["params"].to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=atol, rtol=0, err_msg=name)
    assert abs(hist["epoch"][0]["test_acc"] - plain["epoch"][0]["test_acc"]) < 1e-9


@pytest.mark.slow
def test_epoch_kernel_matches_the_plain_loop(data, plain):
    # 64 threads, hidden 8: eight lanes split each 49-long sum of layer 1
    _same(fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode="epoch", threads=64,
                    progress=False), plain)


@pytest.mark.slow
def test_step_kernel_matches_the_plain_loop(data, plain):
    _same(fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode="step", threads=32,
                    progress=False), plain)


@pytest.mark.parametrize("blocks,hidden", [(3, 40), (11, 8)], ids=["3 blocks, hidden 40", "11 blocks > batch"])
def test_phase_kernels_on_several_blocks_match_the_numpy_twin(data, blocks, hidden):
    """The grid-stride loops with more than one block (tiles, rows and rows of W1 over blocks), hidden larger than
    the block (each thread then owns several hidden units) and not a multiple of the tile: only the three-launch
    mode can show it in the simulator, whose grid barrier needs a one-block grid; the cooperative kernels run the
    same device code."""
    from numba import cuda
    X, y = data[0], data[1]
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(1).permutation(len(X))[:BATCH * 2]
    trainer = FusedTrainer(params, BATCH, LR, mode="phases", threads=32, blocks=blocks)
    losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                           cuda.device_array(2, np.float32)).copy_to_host()
    want_losses, want = sgd_epoch_ref(X, y, perm, start, BATCH, LR)
    np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
    got = params.to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)


def test_arguments_are_checked(data):
    from numba import cuda
    params = init_params(HIDDEN, SEED, n_in=49)
    with pytest.raises(ValueError, match="mode"):
        FusedTrainer(params, BATCH, LR, mode="fast")
    with pytest.raises(ValueError, match="threads"):
        FusedTrainer(params, BATCH, LR, threads=48)
    with pytest.raises(ValueError, match="batch_size"):
        FusedTrainer(params, 2048, LR)
    with pytest.raises(ValueError, match="hidden"):
        FusedTrainer(init_params(2000, SEED, n_in=49), BATCH, LR)
    with pytest.raises(ValueError, match=r"batch_size \* hidden <= 8192"):   # dH must fit in shared memory
        FusedTrainer(init_params(129, SEED, n_in=49), 64, LR)
    FusedTrainer(init_params(128, SEED, n_in=49), 64, LR)                        # 64 * 128 = 8192 fits
    if course.SIMULATOR:
        with pytest.raises(ValueError, match="one block"):
            FusedTrainer(params, BATCH, LR, mode="epoch", blocks=2)
    t = FusedTrainer(params, BATCH, LR)
    X_d, y_d, perm_d = cuda.to_device(data[0]), cuda.to_device(data[1]), cuda.to_device(np.arange(16))
    with pytest.raises(ValueError, match="device array"):
        t.epoch(data[0], y_d, perm_d, cuda.device_array(2, np.float32))
    with pytest.raises(ValueError, match="losses"):
        t.epoch(X_d, y_d, perm_d, cuda.device_array(3, np.float32))
    with pytest.raises(ValueError, match="columns"):
        t.epoch(cuda.to_device(np.zeros((len(data[1]), 50), np.float32)), y_d, perm_d,
                cuda.device_array(2, np.float32))
    with pytest.raises(ValueError, match="labels"):
        fit_fused(data[0], data[1] + 10, data[2], data[3], hidden=HIDDEN, batch_size=BATCH, epochs=1)


# --- course.perf: the launchers of notebook 08's fused kernels and the register-blocked matmul ---------------
# float32 tolerances: sums of <= 40 products of N(0, 1) values in another order than NumPy: 1e-4 relative.

def test_matmul_v3_matches_numpy_at_odd_sizes():
    from numba import cuda
    from course.perf import matmul_v3
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
    from course import perf
    matmul = getattr(perf, f"matmul_{version}")
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
    from course.perf import softmax_xent_grad
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
    from course.perf import grad_wb
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
    from course.perf import train_step_9
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
