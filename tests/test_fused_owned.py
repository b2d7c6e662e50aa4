"""scripts/fused_owned.py, the owned-columns experiment (one grid barrier per step; measured slower than
course.fused on the H200, so not adopted), against the NumPy twin and the plain loop, in the simulator.

Tiny sizes as in test_fused.py: 7x7-pooled inputs (49 pixels), hidden 8, batch 8, three steps. Tolerance 1e-5
absolute on losses (~2) and parameters (~0.1): float32 sums of at most 49 products in another order than the twin;
with several blocks the logits are a sum of atomic adds whose order varies from run to run (the 1e-5 covers it)."""
import pathlib
import sys

import numpy as np
import pytest

import course
from course.data import load_mnist
from course.train import fit, init_params, pool

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
from fused_owned import FusedTrainer, fit_fused, sgd_epoch_ref  # noqa: E402

SEED, HIDDEN, BATCH, STEPS, LR = 3, 8, 8, 3, 0.1


@pytest.fixture(scope="module")
def data():
    X, y, Xt, yt = load_mnist(None)
    return pool(X[:BATCH * STEPS + 5], 4), y[:BATCH * STEPS + 5], pool(Xt[:16], 4), yt[:16]


def test_epoch_and_step_kernels_match_the_plain_loop(data):
    plain = fit(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, log_every=1, progress=False)
    for mode in ("epoch", "step"):
        hist = fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode=mode, threads=64,
                         progress=False)
        np.testing.assert_allclose(hist["loss"], plain["loss"], atol=1e-5, rtol=0)
        want, got = plain["params"].to_host(), hist["params"].to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=f"{mode} {name}")


@pytest.mark.parametrize("blocks,hidden", [(3, 20), (8, 8)], ids=["3 blocks of 7 columns", "8 blocks of 1"])
def test_two_launch_mode_on_several_blocks_matches_the_numpy_twin(data, blocks, hidden):
    """Several owners (the last owns fewer columns), the atomic logits, the last block zeroing them: only the
    two-launch mode can run several blocks in the simulator (its grid barrier needs a one-block grid)."""
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
    assert not np.any(trainer.logits.copy_to_host()), "the last block must leave the logits zero"


def test_ownership_limits_are_checked():
    with pytest.raises(ValueError, match="hidden units"):
        FusedTrainer(init_params(64, SEED, n_in=49), BATCH, LR, mode="phases", blocks=4)   # 16 columns each
    with pytest.raises(ValueError, match="batch_size"):
        FusedTrainer(init_params(HIDDEN, SEED, n_in=49), 256, LR)
    if course.SIMULATOR:
        with pytest.raises(ValueError, match="one block"):
            FusedTrainer(init_params(HIDDEN, SEED, n_in=49), BATCH, LR, mode="epoch", blocks=2)
