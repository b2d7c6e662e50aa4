"""scripts/fused_bytes.py (the one-barrier experiment of issue 13, not adopted) against the NumPy twin, in the
simulator: 7x7-pooled inputs rounded to bytes / 255 (49 pixels, 13 words), batch 8, three steps."""
import os
import sys

import numpy as np
import pytest
from numba import cuda

import course  # noqa: F401
from course.data import load_mnist
from course.train import init_params, pool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import fused_bytes as fb  # noqa: E402

SEED, BATCH, STEPS, LR = 3, 8, 3, 0.1


@pytest.fixture(scope="module")
def data():
    X, y, _, _ = load_mnist(None)
    Xs = (np.rint(pool(X[:BATCH * STEPS + 5], 4) * 255) / 255).astype(np.float32)   # bytes / 255 again
    return Xs, y[:BATCH * STEPS + 5]


@pytest.mark.parametrize("mode,hidden", [("epoch", 8), ("step", 3)])
def test_matches_the_numpy_twin(data, mode, hidden):
    """One block owns every unit (the simulator's grid barrier needs one block): W1 from global memory per unit."""
    X, y = data
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(1).permutation(len(X))[:BATCH * STEPS]
    trainer = fb.FusedTrainer(params, BATCH, LR, mode=mode)
    losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                           cuda.device_array(STEPS, np.float32)).copy_to_host()
    want_losses, want = fb.sgd_epoch_ref(X, y, perm, start, BATCH, LR)
    np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
    got = params.to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-6, rtol=0, err_msg=name)


def test_pixels_must_be_bytes(data):
    X, _ = data
    trainer = fb.FusedTrainer(init_params(4, SEED, n_in=X.shape[1]), BATCH, LR)
    words = trainer.pixels(cuda.to_device(X)).copy_to_host()                 # (N, 13) uint32: 4 pixels each
    assert words.shape == (len(X), 13) and words.dtype == np.uint32
    assert np.array_equal(words.view(np.uint8)[:, :49] / np.float32(255), X)
    with pytest.raises(ValueError, match="bytes"):
        trainer.pixels(cuda.to_device(X + np.float32(1e-3)))
