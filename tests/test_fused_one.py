"""scripts/fused_one.py (one grid barrier per step, issue 13) against the NumPy twin, in the simulator: 7x7-pooled
inputs (49 pixels), batch 8, four steps (Z's three copies and W2's two each used more than once). Its modes on
several blocks ran on the H200 (scripts/tune_fused_one.py); the simulator's grid barrier needs one block."""
import os
import sys

import numpy as np
import pytest
from numba import cuda

import course  # noqa: F401
from course.data import load_mnist
from course.train import init_params, pool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import fused_one as fo  # noqa: E402

SEED, BATCH, STEPS, LR = 3, 8, 4, 0.1


@pytest.fixture(scope="module")
def data():
    X, y, _, _ = load_mnist(None)
    return pool(X[:BATCH * STEPS + 5], 4), y[:BATCH * STEPS + 5]


@pytest.mark.parametrize("mode,hidden,threads,blocks", [("epoch", 8, 64, None), ("step", 3, 64, None)])
def test_matches_the_numpy_twin(data, mode, hidden, threads, blocks):
    X, y = data
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(1).permutation(len(X))[:BATCH * STEPS]
    trainer = fo.FusedTrainer(params, BATCH, LR, mode=mode, threads=threads, blocks=blocks)
    for epoch in range(2 if mode == "epoch" else 1):      # a second launch starts from what the first left
        losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                               cuda.device_array(STEPS, np.float32)).copy_to_host()
        want_losses, want = fo.sgd_epoch_ref(X, y, perm, start, BATCH, LR)
        np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
        got = params.to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
        start = want
    assert not np.any(trainer.Zb.copy_to_host())
