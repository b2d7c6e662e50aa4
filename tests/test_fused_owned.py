"""The two fused-loop experiments of scripts/ (not adopted: see notebooks/results/fused-h200.json) against the NumPy
twin and the plain loop, in the simulator: fused_owned.py (block j owns hidden units, one grid barrier per step;
slower than course.fused on the H200) and fused_split.py (2-D tiles of W1, two barriers per step; on par).

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
import fused_owned  # noqa: E402
import fused_split  # noqa: E402

SEED, HIDDEN, BATCH, STEPS, LR = 3, 8, 8, 3, 0.1


@pytest.fixture(scope="module")
def data():
    X, y, Xt, yt = load_mnist(None)
    return pool(X[:BATCH * STEPS + 5], 4), y[:BATCH * STEPS + 5], pool(Xt[:16], 4), yt[:16]


@pytest.fixture(params=["fused_owned", "fused_split"])
def fused(request):
    return {"fused_owned": fused_owned, "fused_split": fused_split}[request.param]


@pytest.mark.slow
def test_epoch_and_step_kernels_match_the_plain_loop(data, fused):
    plain = fit(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, log_every=1, progress=False)
    for mode in ("epoch", "step"):
        hist = fused.fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode=mode,
                               threads=64, progress=False)
        np.testing.assert_allclose(hist["loss"], plain["loss"], atol=1e-5, rtol=0)
        want, got = plain["params"].to_host(), hist["params"].to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=f"{mode} {name}")


@pytest.mark.parametrize("blocks,hidden", [(3, 20), (8, 8), (13, 40)],
                         ids=["3 blocks, hidden 20", "8 blocks, hidden 8", "13 blocks, hidden 40"])
def test_launch_per_phase_mode_on_several_blocks_matches_the_numpy_twin(data, fused, blocks, hidden):
    """Several owners (the last owns fewer columns or inputs), the atomic sums, the last block zeroing them and
    writing the copies back: only mode "phases" can run several blocks in the simulator (its grid barrier needs a
    one-block grid). fused_split at 13 blocks, hidden 40: a 3 x 4 grid of tiles of 13 inputs x 14 hidden units."""
    from numba import cuda
    X, y = data[0], data[1]
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(1).permutation(len(X))[:BATCH * 2]
    trainer = fused.FusedTrainer(params, BATCH, LR, mode="phases", threads=32, blocks=blocks)
    losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                           cuda.device_array(2, np.float32)).copy_to_host()
    want_losses, want = fused.sgd_epoch_ref(X, y, perm, start, BATCH, LR)
    np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
    got = params.to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
    assert not np.any(trainer.logits.copy_to_host()), "the last block must leave the logits zero"
    assert not np.any(getattr(trainer, "Z", trainer.logits).copy_to_host()), "and the sums of the first layer"


def test_ownership_limits_are_checked(fused):
    with pytest.raises(ValueError, match="hidden units"):
        fused.FusedTrainer(init_params(512, SEED, n_in=784), 64, LR, mode="phases", blocks=4)   # 128 columns each
    with pytest.raises(ValueError, match="batch_size"):
        fused.FusedTrainer(init_params(HIDDEN, SEED, n_in=49), 256, LR)
    if course.SIMULATOR:
        with pytest.raises(ValueError, match="one block"):
            fused.FusedTrainer(init_params(HIDDEN, SEED, n_in=49), BATCH, LR, mode="epoch", blocks=2)
