"""scripts/fused_column.py (one grid barrier per step and no phase B, issue 13) against the NumPy twin: in the
simulator on one tile (60 inputs, 7 hidden units, batch 16, five steps: every one of L's three buffers used and
zeroed, two launches in a row); on a GPU at MNIST's size with a block per tile (128)."""
import os
import sys

import numpy as np
import pytest
from numba import cuda

import course
from course.train import init_params

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import fused_column as fc  # noqa: E402

LR = 0.1


@pytest.mark.parametrize("K,hidden,batch,steps", [(60, 7, 16, 5)] + ([] if course.SIMULATOR else [(784, 128, 64, 12),
                                                                                                (250, 40, 37, 7)]))
def test_matches_the_numpy_twin(K, hidden, batch, steps):
    rng = np.random.default_rng(K)
    X = rng.random((steps * batch + 9, K), dtype=np.float32)
    y = rng.integers(0, 10, len(X))
    perm = rng.permutation(len(X))[:steps * batch]
    params = init_params(hidden, 2, n_in=K)
    start = params.to_host()
    trainer = fc.ColumnTrainer(params, batch, LR)
    for launch in range(2):                      # the second starts from what the first left: L, Z, counts
        losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                               cuda.device_array(steps, np.float32)).copy_to_host()
        want_losses, want = fc.sgd_epoch_ref(X, y, perm, start, batch, LR)
        np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
        got = params.to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
        start = want
    assert not np.any(trainer.L.copy_to_host()) and not np.any(trainer.Z.copy_to_host())
    assert np.all(trainer.cnt.copy_to_host() == 2 * steps * -(-K // fc.TK))


def test_the_simulator_refuses_more_than_one_tile():
    if not course.SIMULATOR:
        pytest.skip("the simulator's limit")
    with pytest.raises(ValueError, match="one tile"):
        fc.ColumnTrainer(init_params(9, 0, n_in=60), 16, LR)
