"""Notebook 03's launchers and kernels against their NumPy references at odd sizes, and their argument checks.

Tolerances (float32 on the device, float64 in the references):
- probs: absolute 1e-6 (probabilities in [0, 1], a float32 exp and a division: a few ulps of 1);
- per-row losses: relative 1e-5 or absolute 1e-5 (log s - (z_y - m) in float32; z_y - m is rounded to ~1e-7 relative);
- batch mean and sums: relative 1e-5 (a float32 tree and atomics over at most a few thousand terms);
- counts: exact (int32 atomics)."""
import numpy as np
import pytest
from numba import cuda

import course
from course import loss as L


def logits_for(rng, B, C, scale=3.0):
    return (rng.standard_normal((B, C)) * scale).astype(np.float32)


def large_logits(rng, B, C):
    """Logits where the textbook softmax fails: uniform in [-100, 100], every third row shifted below -150."""
    z = rng.uniform(-100, 100, (B, C))
    z[::3] -= 250.0
    return z.astype(np.float32)


@pytest.fixture(params=[256, 96], ids=["THREADS=256", "THREADS=96"])
def threads(request, monkeypatch):
    """Run each launcher test at two launch shapes: the launchers read L.THREADS at call time."""
    monkeypatch.setattr(L, "THREADS", request.param)
    return request.param


@pytest.mark.parametrize("B, C, itype", [(1, 10, np.int64), (37, 10, np.int32), (53, 7, np.int64),
                                         (course.pick(10_001, 101), 10, np.int64), (29, 13, np.int32)])
def test_cross_entropy_matches_reference(B, C, itype, threads):
    assert B % threads
    rng = np.random.default_rng(B * C)
    logits = logits_for(rng, B, C)
    y = rng.integers(0, C, B).astype(itype)
    loss_d, probs_d = L.cross_entropy(cuda.to_device(logits), cuda.to_device(y))
    ref_loss, ref_probs = L.softmax_xent_ref(logits, y)
    assert loss_d.shape == (1,) and loss_d.dtype == np.float32 and not isinstance(loss_d, np.ndarray)
    assert probs_d.shape == (B, C) and probs_d.dtype == np.float32
    np.testing.assert_allclose(probs_d.copy_to_host(), ref_probs, atol=1e-6, rtol=0)
    np.testing.assert_allclose(loss_d.copy_to_host()[0], ref_loss, rtol=1e-5)


def test_softmax_rows_with_large_logits():
    rng = np.random.default_rng(7)
    B, C = 61, 10
    logits = large_logits(rng, B, C)
    y = rng.integers(0, C, B)
    losses_ref, probs_ref = L.softmax_xent_rows_ref(logits, y)
    with np.errstate(over="ignore", invalid="ignore"):  # the reason for this test: the naive formula gives NaN
        e = np.exp(logits)
        assert np.isnan(e / e.sum(axis=1, keepdims=True)).any()
    for block in (32, 64):  # two launch shapes, B not a multiple of either
        probs = cuda.device_array((B, C), np.float32)
        losses = cuda.device_array(B, np.float32)
        L.softmax_xent_kernel[L.cdiv(B, block), block](cuda.to_device(logits), cuda.to_device(y), probs, losses)
        probs, losses = probs.copy_to_host(), losses.copy_to_host()
        assert np.isfinite(probs).all() and np.isfinite(losses).all()
        np.testing.assert_allclose(probs, probs_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(losses, losses_ref, rtol=1e-5, atol=1e-5)
        assert losses.max() > 100  # labels far below the row's max: -log of an underflowed p would be inf


def test_cross_entropy_large_logits_finite(threads):
    rng = np.random.default_rng(8)
    logits, y = large_logits(rng, 40, 10), rng.integers(0, 10, 40)
    loss_d, probs_d = L.cross_entropy(cuda.to_device(logits), cuda.to_device(y))
    ref_loss, ref_probs = L.softmax_xent_ref(logits, y)
    np.testing.assert_allclose(loss_d.copy_to_host()[0], ref_loss, rtol=1e-5)
    np.testing.assert_allclose(probs_d.copy_to_host(), ref_probs, atol=1e-6, rtol=0)


def test_reference_on_known_values():
    loss, probs = L.softmax_xent_ref(np.zeros((4, 10), np.float32), np.arange(4))
    assert loss == pytest.approx(np.log(10), rel=1e-12) and probs.dtype == np.float32
    np.testing.assert_allclose(probs, 0.1, rtol=1e-7)
    loss, probs = L.softmax_xent_ref(np.array([[1000.0, 0.0], [-1000.0, -1001.0]], np.float32), np.array([1, 0]))
    assert loss == pytest.approx((1000.0 + np.log1p(np.exp(-1.0))) / 2, rel=1e-12)
    assert np.isfinite(probs).all()


def test_cross_entropy_reuses_buffers_and_resets_the_mean(threads):
    rng = np.random.default_rng(9)
    B, C = 45, 10
    logits, y = logits_for(rng, B, C), rng.integers(0, C, B)
    probs = cuda.device_array((B, C), np.float32)
    losses = cuda.device_array(B, np.float32)
    loss = cuda.to_device(np.array([123.0], np.float32))  # junk: the launcher must reset it
    for _ in range(2):  # a second call into the same buffers gives the same mean, not twice it
        got_loss, got_probs = L.cross_entropy(cuda.to_device(logits), cuda.to_device(y), probs, losses, loss)
        assert got_loss is loss and got_probs is probs
        np.testing.assert_allclose(loss.copy_to_host()[0], L.softmax_xent_ref(logits, y)[0], rtol=1e-5)
    np.testing.assert_allclose(losses.copy_to_host(), L.softmax_xent_rows_ref(logits, y)[0], rtol=1e-5, atol=1e-5)


def test_bad_label_gives_nan_loss_not_a_wild_read():
    logits = cuda.to_device(np.zeros((3, 10), np.float32))
    loss, probs = L.cross_entropy(logits, cuda.to_device(np.array([1, 10, 2])))
    assert np.isnan(loss.copy_to_host()[0])
    np.testing.assert_allclose(probs.copy_to_host(), 0.1, rtol=1e-6)


@pytest.mark.parametrize("n, block", [(1, 32), (100, 32), (130, 48), (77, 20), (course.pick(100_003, 300), 256)])
def test_sum_kernel_adds_to_total(n, block):
    x = np.random.default_rng(n).uniform(-1, 2, n).astype(np.float32)
    total = cuda.to_device(np.array([2.5], np.float32))  # the kernel adds: the start value stays in
    L.sum_kernel[L.cdiv(n, block), block](cuda.to_device(x), total)
    np.testing.assert_allclose(total.copy_to_host()[0], 2.5 + x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 37, 300])
def test_batch_mean(n, threads):
    x = np.random.default_rng(n).uniform(0, 3, n).astype(np.float32)
    out = cuda.to_device(np.array([-9.0], np.float32))
    assert L.batch_mean(cuda.to_device(x), out) is out
    np.testing.assert_allclose(out.copy_to_host()[0], x.astype(np.float64).mean(), rtol=1e-5)


@pytest.mark.parametrize("B, C, itype", [(0, 10, np.int64), (1, 10, np.int64), (37, 10, np.int32), (53, 7, np.int64),
                                         (course.pick(10_001, 301), 10, np.int64)])
def test_count_correct_exact(B, C, itype, threads):
    rng = np.random.default_rng(B + C)
    logits = rng.standard_normal((B, C)).astype(np.float32)
    y = rng.integers(0, C, B).astype(itype)
    y[::3] = np.argmax(logits[::3], axis=1)  # a good share of right answers
    if B:
        logits[::5, 0] = logits[::5, 3] = logits[::5].max(axis=1) + 1  # ties: argmax takes the first
    out = cuda.to_device(np.array([77], np.int32))  # junk: reset by the launcher
    got = L.count_correct(cuda.to_device(logits), cuda.to_device(y), out=out)
    assert got is out and got.dtype == np.int32 and got.shape == (1,)
    assert int(got.copy_to_host()[0]) == L.count_correct_ref(logits, y)


def test_launchers_refuse_bad_arguments():
    logits = cuda.to_device(np.zeros((6, 10), np.float32))
    y = cuda.to_device(np.arange(6))
    for fn in (L.cross_entropy, L.count_correct):
        with pytest.raises(ValueError, match="device array"):
            fn(np.zeros((6, 10), np.float32), y)
        with pytest.raises(ValueError, match="device array"):
            fn(logits, np.arange(6))
        with pytest.raises(ValueError, match="dtype"):
            fn(cuda.to_device(np.zeros((6, 10))), y)
        with pytest.raises(ValueError, match="dtype"):
            fn(logits, cuda.to_device(np.zeros(6, np.float32)))
        with pytest.raises(ValueError, match="2-D"):
            fn(cuda.to_device(np.zeros(60, np.float32)), y)
        with pytest.raises(ValueError, match="1-D"):
            fn(logits, cuda.to_device(np.zeros((6, 1), np.int64)))
        with pytest.raises(ValueError, match="5 labels for 6 rows"):
            fn(logits, y[:5])
        with pytest.raises(ValueError, match="contiguous"):
            fn(logits[:, ::2], y)
    with pytest.raises(ValueError, match="empty batch"):
        L.cross_entropy(cuda.to_device(np.zeros((0, 10), np.float32)), cuda.to_device(np.zeros(0, np.int64)))
    with pytest.raises(ValueError, match="shape"):
        L.cross_entropy(logits, y, probs=cuda.device_array((6, 9), np.float32))
    with pytest.raises(ValueError, match="shape"):
        L.cross_entropy(logits, y, losses=cuda.device_array(5, np.float32))
    with pytest.raises(ValueError, match="loss must have shape"):
        L.cross_entropy(logits, y, loss=cuda.device_array(2, np.float32))
    with pytest.raises(ValueError, match="dtype"):
        L.cross_entropy(logits, y, probs=cuda.device_array((6, 10), np.float64))
    with pytest.raises(ValueError, match="dtype"):
        L.count_correct(logits, y, out=cuda.device_array(1, np.float32))
    with pytest.raises(ValueError, match="empty"):
        L.batch_mean(cuda.device_array(0, np.float32))
    with pytest.raises(ValueError, match="shape"):
        L.batch_mean(cuda.device_array(4, np.float32), out=cuda.device_array((1, 1), np.float32))


@pytest.mark.skipif(course.SIMULATOR, reason="the simulator has no warp shuffles: sum_shfl_kernel runs on a GPU only")
@pytest.mark.parametrize("n, threads", [(1, 32), (1000, 256), (100_003, 96), (1 << 20, 1024)])
def test_sum_shfl_kernel_matches_numpy_on_gpu(n, threads):
    """The warp-shuffle block sum adds to total like sum_kernel, at odd sizes and several multiples of 32."""
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    total = cuda.to_device(np.array([1.5], np.float32))              # it adds: the start value must stay
    L.sum_shfl_kernel[(n + threads - 1) // threads, threads](cuda.to_device(x), total)
    want = 1.5 + float(np.sum(x, dtype=np.float64))
    assert abs(total.copy_to_host()[0] - want) <= 1e-5 * want
