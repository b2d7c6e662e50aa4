"""CUDA graphs of a training step (course.graphs): the recorded launches against course.train.fit.

In the simulator (no graphs there) GraphLoop(graph=False) runs the very launches a graph would record, so the
device-side batch indices (batch_index_kernel) and loss bookkeeping (record_loss_kernel) are checked here; on a
GPU the graphs themselves are. Tiny sizes as in test_fused.py; tolerances: float32 sums in another order, 1e-5."""
import functools

import numpy as np
import pytest

import course
from course.fused import FusedTrainer
from course.graphs import Graph, GraphLoop, fit_graph, graph_support
from course.train import fit, init_params

SEED, HIDDEN, BATCH, STEPS, LR = 3, 8, 8, 3, 0.1
TRAINERS = {"plain": None, "fused_step": functools.partial(FusedTrainer, mode="step"),  # notebook 12's, passed in
            "fused_phases": functools.partial(FusedTrainer, mode="phases")}
ON_GPU = graph_support() is None


@pytest.fixture(scope="module")
def plain(data):
    return fit(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, log_every=1, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("loop", TRAINERS)
def test_recorded_step_matches_the_plain_loop(data, plain, loop):
    """Every step's loss (recorded on the device at its batch number) and the final parameters."""
    hist = fit_graph(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, trainer=TRAINERS[loop],
                     graph=ON_GPU, progress=False)
    assert len(hist["loss"]) == STEPS
    np.testing.assert_allclose(hist["loss"], plain["loss"], atol=1e-5, rtol=0)
    want, got = plain["params"].to_host(), hist["params"].to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
    assert abs(hist["epoch"][0]["test_acc"] - plain["epoch"][0]["test_acc"]) < 1e-9


@pytest.mark.slow
def test_a_second_epoch_starts_again_at_batch_0(data):
    """The counter is reset per epoch: the same order twice gives two epochs of SGD, not reads past perm."""
    from numba import cuda
    X, y = data[0], data[1]
    perm = np.random.default_rng(0).permutation(len(X))[:BATCH * 2]
    p = init_params(HIDDEN, SEED, n_in=X.shape[1])
    runner = GraphLoop(cuda.to_device(X), cuda.to_device(y), p, BATCH, LR, BATCH * 2, graph=ON_GPU)
    first = runner.epoch(perm).copy_to_host()
    second = runner.epoch(perm).copy_to_host()
    assert np.all(second < first)                              # the same batches, after a step on each


def test_arguments_and_the_simulator(data):
    from numba import cuda
    X_d, y_d = cuda.to_device(data[0]), cuda.to_device(data[1])
    p = init_params(HIDDEN, SEED, n_in=data[0].shape[1])
    with pytest.raises(ValueError, match="trainer must have a launch_step method"):
        GraphLoop(X_d, y_d, p, BATCH, LR, BATCH * 2, trainer="fused", graph=False)
    with pytest.raises(ValueError, match="multiple"):
        GraphLoop(X_d, y_d, p, BATCH, LR, BATCH * 2 + 1, graph=False)
    if course.SIMULATOR:
        assert {"cpu": "the CPU executor", "sim": "the CUDA simulator"}[course.runs_on()] in graph_support()
        with pytest.raises(RuntimeError, match="has no CUDA graphs"):
            Graph(lambda stream: None)
