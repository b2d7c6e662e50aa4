"""The fused training loop (course.fused) against notebook 06's loop and the NumPy twin, in the simulator.

Tiny sizes: 7x7-pooled inputs (49 pixels), hidden 8, batch 8, three steps. Tolerances: float32 sums of at most
49 products, accumulated in another order than the reference (lanes, atomics): 1e-5 absolute on parameters of
size ~0.1, 1e-5 on losses of size ~2."""
import numpy as np
import pytest

import course
from course.data import load_mnist
from course.fused import FusedTrainer, fit_fused, sgd_epoch_ref
from course.train import fit, init_params

SEED, HIDDEN, BATCH, STEPS, LR = 3, 8, 8, 3, 0.1


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
    # 64 threads, hidden 8, 49 inputs: one tile, kept in shared memory between the steps
    _same(fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode="epoch", threads=64,
                    progress=False), plain)


@pytest.mark.slow
def test_step_kernel_matches_the_plain_loop(data, plain):
    _same(fit_fused(*data, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR, seed=SEED, mode="step", threads=128,
                    progress=False), plain)


@pytest.mark.parametrize("blocks,hidden", [(3, 40), (11, 8), (2, 70)],
                         ids=["3 blocks, hidden 40", "11 blocks > batch", "2 blocks, hidden 70 > threads"])
def test_phase_kernels_on_several_blocks_match_the_numpy_twin(data, blocks, hidden):
    """The loops over tiles, rows and hidden units with more than one block (5 tiles on 3 blocks: a block restages
    its second tile), blocks with nothing to do, hidden not a multiple of the tile's 8 units and larger than the
    block (threads then own several units): only the three-launch mode can show it in the simulator, whose grid
    barrier needs a one-block grid; the cooperative kernels run the same device code."""
    from numba import cuda
    X, y = data[0], data[1]
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(1).permutation(len(X))[:BATCH * 2]
    trainer = FusedTrainer(params, BATCH, LR, mode="phases", threads=64, blocks=blocks)
    losses = trainer.epoch(cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm),
                           cuda.device_array(2, np.float32)).copy_to_host()
    want_losses, want = sgd_epoch_ref(X, y, perm, start, BATCH, LR)
    np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
    got = params.to_host()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)


@pytest.mark.skipif(course.SIMULATOR, reason="grid barriers between several blocks need a GPU")
@pytest.mark.parametrize("blocks", [None, 5, 3], ids=["spare blocks", "a block per tile", "tiles restaged"])
def test_epoch_kernel_on_a_gpu_matches_the_numpy_twin(data, blocks):
    """The epoch kernel with 512 threads (hidden 40: 5 tiles): with blocks to spare the blocks without a tile
    update the small layer (update_small), with 5 blocks every block updates a hidden unit after phase A, with 3
    each block restages its tiles; grid_barrier's count grows by 2 gridDim a step (and gridDim a launch when the
    kernel gathers X's tiles for the TMA) and stays a multiple of it."""
    from numba import cuda
    X, y = data[0], data[1]
    params = init_params(40, SEED, n_in=X.shape[1])
    start = params.to_host()
    perm = np.random.default_rng(2).permutation(len(X))[:BATCH * STEPS]
    t = FusedTrainer(params, BATCH, LR, mode="epoch", threads=512, blocks=blocks)
    X_d, y_d, perm_d = cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm)
    for epoch in range(2):                       # the count carries over from one launch to the next
        losses = t.epoch(X_d, y_d, perm_d, cuda.device_array(STEPS, np.float32)).copy_to_host()
        want_losses, want = sgd_epoch_ref(X, y, perm, start, BATCH, LR)
        start = want
        np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
        got = params.to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
        assert int(t.bar.copy_to_host()[0]) == (epoch + 1) * (2 * STEPS + (t.Xt is not None)) * t._blocks
    assert (t._blocks > t.ntiles + 1) == (blocks is None)


@pytest.mark.skipif(course.SIMULATOR, reason="the TMA is a GPU's")
@pytest.mark.parametrize("batch,hidden,blocks", [(64, 128, None), (37, 24, 40)])
def test_the_tma_brings_every_tile_of_x(batch, hidden, blocks):
    """784 inputs (tiles of 100: the last 84 wide, its other 16 columns zeros), a block per tile and more: the
    epoch kernel with the batches' tiles gathered in the kernel for the TMA (gather_tiles) matches the
    twin, and so does the same trainer with the threads staging X; Xt holds the last two batches' tiles; a batch
    of 37 leaves 27 rows of sX at their zeros (40 blocks: 3 without a row gather the tiles)."""
    from numba import cuda

    from course.fused import TK, has_tma
    X, y, _, _ = load_mnist(None)
    X, y = X[:batch * 5 + 3], y[:batch * 5 + 3]
    perm = np.random.default_rng(5).permutation(len(X))[:batch * 5]
    X_d, y_d, perm_d = cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm)
    start = init_params(hidden, SEED).to_host()
    for copies in (True, False):
        params = init_params(hidden, SEED)
        t = FusedTrainer(params, batch, LR, mode="epoch", blocks=blocks, tma=None if copies else False)
        losses = t.epoch(X_d, y_d, perm_d, cuda.device_array(5, np.float32)).copy_to_host()
        want_losses, want = sgd_epoch_ref(X, y, perm, start, batch, LR)
        np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
        got = params.to_host()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=0, err_msg=name)
        assert (t.Xt is not None) == (copies and has_tma())       # tma=False: the threads stage X
        if copies:
            if t.Xt is not None:                 # steps 4 and 3, in slots 0 and 1; the last tile: 84 inputs, zeros
                Xt = t.Xt.copy_to_host().reshape(2, 8, 64, TK)[:, :, :batch]    # CHUNK rows a tile
                for slot, step in ((0, 4), (1, 3)):
                    rows = perm[step * batch:(step + 1) * batch]
                    np.testing.assert_array_equal(Xt[slot, :7].transpose(1, 0, 2).reshape(batch, 700), X[rows, :700])
                    np.testing.assert_array_equal(Xt[slot, 7, :, :84], X[rows, 700:])
                    assert not np.any(Xt[slot, 7, :, 84:])


def test_arguments_are_checked(data):
    from numba import cuda
    params = init_params(HIDDEN, SEED, n_in=49)
    with pytest.raises(ValueError, match="mode"):
        FusedTrainer(params, BATCH, LR, mode="fast")
    for threads in (48, 96, 1024):
        with pytest.raises(ValueError, match="threads"):
            FusedTrainer(params, BATCH, LR, threads=threads)
    with pytest.raises(ValueError, match="batch_size of at least 1"):
        FusedTrainer(params, 0, LR)
    FusedTrainer(params, 1000, LR)                                          # any batch: X is staged in chunks
    for momentum, nesterov in ((1.0, False), (-0.1, False), (0.0, True)):
        with pytest.raises(ValueError, match="momentum"):
            FusedTrainer(params, BATCH, LR, momentum=momentum, nesterov=nesterov)
    FusedTrainer(init_params(2000, SEED, n_in=49), BATCH, LR)               # any hidden: W2 stays in global memory
    with pytest.raises(ValueError, match="at most 15 outputs"):
        FusedTrainer(dict(W1=params["W1"], b1=params["b1"], W2=cuda.device_array((HIDDEN, 16), np.float32),
                          b2=cuda.device_array(16, np.float32)), BATCH, LR)
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


def test_clocks_are_recorded_in_order_and_reported(data):
    """timed_epoch: every recorded point of every step, in the order the kernel passes them (in the simulator the
    host's clock); clock_report gives a number for each part; clocks are refused outside mode "epoch"."""
    from numba import cuda
    from course.epoch import CLOCK_PARTS, clock_report
    from course.fused import NPOINTS
    X, y = data[0], data[1]
    t = FusedTrainer(init_params(HIDDEN, SEED, n_in=X.shape[1]), BATCH, LR, mode="epoch")
    X_d, y_d, perm_d = cuda.to_device(X), cuda.to_device(y), cuda.to_device(np.arange(2 * BATCH))
    T = t.timed_epoch(X_d, y_d, perm_d, cuda.device_array(2, np.float32))
    assert T.shape[0] == 2 and T.shape[2] == NPOINTS and T.shape[1] == (1 if course.SIMULATOR else t._blocks)
    order = [0, 6, 8, 1, 2, 9, 10, 3, 4, 12, 15, 14, 5]                # the kernel's order of the points
    for step in T:                                   # block 0 has a tile, a row and a unit: it passes every point
        assert np.all(np.diff(step[0, order]) >= 0) and step[0, 0] > 0, step
    assert np.all(T[1, 0, 0] >= T[0, 0, 5])
    report = clock_report(T, t.ntiles, BATCH)
    spare = T.shape[1] > t.ntiles                    # blocks without a tile: their part is reported too
    assert set(report) == {k for k, v in CLOCK_PARTS.items() if v[2] != "spare" or spare} | {"step"}
    assert report["step"] > 0
    with pytest.raises(ValueError, match="clocks"):
        FusedTrainer(t.params, BATCH, LR, mode="step").epoch(X_d, y_d, perm_d, cuda.device_array(2, np.float32),
                                                             clocks=cuda.device_array((2, 1, NPOINTS), np.uint64))


@pytest.mark.slow
def test_the_ladder_matches_the_numpy_twin(data, capsys):
    """ladder: each milestone (course.fused.MILESTONES) trained one epoch of 2 steps at an odd batch size (7) and
    7 hidden units (one tile, its last unit past the end: kept in shared memory by the epoch kernel; on a GPU 8
    blocks, one without a batch row, so fused4 gathers X for the TMA) ends within float32 noise of sgd_epoch_ref; one
    printed row each; fused4 a row that says why it did not run where the device has no TMA."""
    from course.fused import MILESTONES, has_tma, ladder
    X, y = data[0], data[1]
    perm = np.random.default_rng(4).permutation(len(X))[:7 * 2]
    rows = ladder(X, y, perm, 7, 7, LR, seed=SEED)
    assert list(rows) == list(MILESTONES) == ["fused1", "fused2", "fused3", "fused4", "fused5"]
    for name, (diff, ms) in rows.items():
        if name == "fused4" and not has_tma():
            assert diff is None and ms is None
            continue
        assert diff < 1e-5, name
        assert (ms is None) == course.SIMULATOR and (ms is None or ms > 0)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed[1:]] == list(MILESTONES)
    assert ("no TMA" in printed[-2]) == (not has_tma())
    assert "no bulk copies" not in printed[-2]


def test_the_ladder_runs_the_rungs_it_is_given(data, capsys):
    """ladder(names=...): notebook 12 measures each rung where it is built, so it runs only the rungs named, in the
    order named, under one header; an unknown name is a KeyError before anything runs. Without a TMA, fused4 alone
    is a row that says why it did not run (nothing compiles: fast)."""
    from course.fused import has_tma, ladder
    X, y = data[0], data[1]
    perm = np.random.default_rng(4).permutation(len(X))[:7 * 2]
    with pytest.raises(KeyError, match="fused9"):
        ladder(X, y, perm, 7, 7, LR, names=["fused9"])
    assert ladder(X, y, perm, 7, 7, LR, names=()) == {}
    header = capsys.readouterr().out.splitlines()
    assert len(header) == 1 and header[0].split()[:7] == ["what", "changes", "max", "|diff|", "ms", "per", "epoch"]
    assert header[0].rstrip().endswith("ms per epoch")   # no "CPU timings" label over rows that print no time
    if has_tma():
        pytest.skip("fused4 runs on this device: test_the_ladder_matches_the_numpy_twin covers it")
    rows = ladder(X, y, perm, 7, 7, LR, names=["fused4"])
    assert rows == {"fused4": (None, None)}
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[1].split()[0] == "fused4" and "no TMA" in printed[1]


def test_tma_is_a_keyword_that_refuses_what_it_cannot_do():
    """tma=True without a TMA (the simulator, a GPU below compute capability 9.0) and tma=True outside the epoch
    kernel are refused with one line; tma=False turns the bulk copies off."""
    from course.fused import has_tma
    params = init_params(HIDDEN, SEED, n_in=49)
    if not has_tma():
        with pytest.raises(ValueError, match="no TMA"):
            FusedTrainer(params, BATCH, LR, tma=True)
    with pytest.raises(ValueError, match="only mode 'epoch'"):
        FusedTrainer(params, BATCH, LR, mode="step", tma=True)
    with pytest.raises(TypeError):
        FusedTrainer(params, BATCH, LR, "epoch", None, None, True)               # keyword only
    assert not FusedTrainer(params, BATCH, LR, tma=False).copies
    assert FusedTrainer(params, BATCH, LR).copies == has_tma()


OPTIMIZERS = {"sgd": (0.0, False), "heavy-ball": (0.9, False), "nesterov": (0.9, True)}


def _twin_epochs(trainer, X, y, perm, start, batch, optimizer, epochs, atol):
    """`epochs` epochs of `trainer` against sgd_epoch_ref with the same optimizer, the velocities carried over."""
    from numba import cuda
    momentum, nesterov = OPTIMIZERS[optimizer]
    X_d, y_d, perm_d = cuda.to_device(X), cuda.to_device(y), cuda.to_device(perm)
    velocity = {k: np.zeros(a.shape) for k, a in start.items()}
    steps = len(perm) // batch
    for epoch in range(epochs):
        losses = trainer.epoch(X_d, y_d, perm_d, cuda.device_array(steps, np.float32)).copy_to_host()
        want_losses, start = sgd_epoch_ref(X, y, perm, start, batch, LR, momentum, nesterov, velocity)
        np.testing.assert_allclose(losses, want_losses, atol=atol, rtol=0, err_msg=f"epoch {epoch} losses")
        got = trainer.params.to_host()
        for name in start:
            np.testing.assert_allclose(got[name], start[name], atol=atol, rtol=0, err_msg=f"epoch {epoch} {name}")
    if momentum:                                 # the velocities the kernel kept are the twin's
        for name, v in zip(("W1", "b1", "W2", "b2"), trainer.V):
            np.testing.assert_allclose(v.copy_to_host(), velocity[name], atol=atol / LR, rtol=0, err_msg=name)


@pytest.mark.parametrize("mode,batch,blocks,optimizer,epochs", [("epoch", 67, 1, "nesterov", 2),
                                                                ("phases", 65, 3, "heavy-ball", 1),
                                                                ("step", 9, 1, "sgd", 1)],
                         ids=["epoch kernel, 2 chunks, nesterov", "3 launches, 2 chunks on 3 blocks, heavy ball",
                              "step kernel, 1 chunk, sgd"])
def test_momentum_and_batches_past_a_chunk_match_the_numpy_twin(mode, batch, blocks, optimizer, epochs):
    """Heavy-ball and Nesterov momentum, and batches of more rows than shared memory holds (CHUNK = 64: staged in
    chunks, the last one partial, of 3 rows or of 1), against the twin (over two epochs: the velocities carry
    over), in every mode; 64 threads, so that phase C's sums take several passes, each over every chunk. Every
    optimizer in every place a parameter descends (update_cells, update_unit; the spare blocks' update_small needs
    a GPU's grid): the GPU test below."""
    from course.data import load_mnist
    from course.train import pool
    X, y, _, _ = load_mnist(None)
    X, y = pool(X[:2 * batch + 3], 4), y[:2 * batch + 3]       # 49 inputs: one tile down
    hidden = 12                                  # two tiles across, the second past the end
    perm = np.random.default_rng(6).permutation(len(X))[:batch * 2]
    params = init_params(hidden, SEED, n_in=X.shape[1])
    start = params.to_host()
    momentum, nesterov = OPTIMIZERS[optimizer]
    t = FusedTrainer(params, batch, LR, mode=mode, threads=64, blocks=blocks, momentum=momentum, nesterov=nesterov)
    _twin_epochs(t, X, y, perm, start, batch, optimizer, epochs, 2e-5)


@pytest.mark.skipif(course.SIMULATOR, reason="784 inputs and a full grid: a GPU's")
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("batch,blocks,tma", [(7, None, None), (64, None, None), (64, None, False), (67, None, None),
                                             (128, None, None), (255, 40, None), (1000, None, None),
                                             (1024, None, False), (513, 5, None)])
def test_the_epoch_kernel_at_real_sizes_matches_the_numpy_twin(optimizer, batch, blocks, tma):
    """784-128-10 with 512 threads, batches of 7 to 1,024 (odd ones too), each optimizer: the grid the trainer
    picks (a block per tile and spare blocks; the TMA where the GPU has one and a batch fits a chunk), 40 blocks
    (fewer than the tiles: restaged each step, T4-like) and 5; two epochs of 3 steps."""
    X, y, _, _ = load_mnist(None)
    X, y = X[:batch * 3 + 5], y[:batch * 3 + 5]
    perm = np.random.default_rng(7).permutation(len(X))[:batch * 3]
    params = init_params(128, SEED)
    start = params.to_host()
    momentum, nesterov = OPTIMIZERS[optimizer]
    t = FusedTrainer(params, batch, LR, mode="epoch", blocks=blocks, tma=tma, momentum=momentum, nesterov=nesterov)
    _twin_epochs(t, X, y, perm, start, batch, optimizer, 2, 5e-5)
