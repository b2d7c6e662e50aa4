"""Notebook 03's exercise checks pass the solutions and reject each planted wrong answer.

Two bugs of a reduction are races, and the simulator runs threads one at a time, so running a kernel there cannot
show them by itself:
- a missing cuda.syncthreads(): the check fills shared memory with NaN while the kernel runs in the simulator, and
  since the simulator lets each thread run until it ends or reaches a barrier, thread 0 reads a cell its
  neighbours have not written yet (NaN). On a GPU the race shows only sometimes, depending on warp timing.
- a plain `total[0] += s[0]` instead of an atomic add: the blocks run one after another in the simulator, so the
  sum comes out right. The check counts atomic adds there (it expects one per block) and scans the kernel's code
  for an atomic on both; the lost additions themselves happen only on a GPU (the check's case with thousands of
  blocks makes them likely there, as notebook 03's race demonstration shows).
Everything else below fails by value, in the simulator as on a GPU."""
import numpy as np
import pytest
from conftest import mutant, mutated, rejects
from numba import cuda

import course
from course import loss as L
from course.checks import CheckFailure, core
from course.checks import loss as checks


def test_solutions_pass():
    checks.check_softmax_xent_kernel(L.softmax_xent_kernel)
    checks.check_sum_kernel(L.sum_kernel)
    checks.check_batch_mean(L.batch_mean)


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----
# A row's edits are (old, new) replacements applied in turn to the solution's source.

def bug(id, says, *edits):
    return pytest.param(edits, says, id=id)


# --- Exercise 3.1: planted wrong softmax kernels ----------------------------------------------------------

@pytest.mark.parametrize("edits, says", [
    # no max subtracted: exp(100) is inf, a row below -104 sums to 0; fails only on the large-logit cases
    bug("no max subtracted", ["overflowed", "log of 0"], ("] - m)", "])", 3)),
    # wrong for a row whose logits are all far below 0; fails only on those rows
    bug("max starts at 0", ["overflowed", "log of 0"], ("m = logits[r, 0]", "m = np.float32(0.0)"),
        ("for c in range(1, C):", "for c in range(C):")),
    # p underflows: -log 0 (or a clamp) is wrong; fails only where z_y is far below the max
    bug("loss from -log p", ["overflowed"],
        ("math.log(s) - (logits[r, label] - m)", "-math.log(max(probs[r, label], np.float32(1e-45)))")),
    bug("no bounds guard", ["outside the output", "out-of-bounds"], ("if r < logits.shape[0]:", "if True:")),
    bug("off by one", ["outside the output", "out-of-bounds"], ("r < logits.shape[0]", "r <= logits.shape[0]")),
    bug("skips the last row", ["never written"], ("r < logits.shape[0]", "r < logits.shape[0] - 1")),
    # off by one in the columns: the last one is neither summed nor written
    bug("skips the last column", ["never written"], ("C = logits.shape[1]", "C = logits.shape[1] - 1")),
    bug("loss forgets log s", ["expected"], ("math.log(s) - (logits[r, label] - m)", "m - logits[r, label]")),
    bug("forgets blockIdx", ["never written"], ("cuda.grid(1)", "cuda.threadIdx.x")),  # rows past block 0
])
def test_softmax_check_rejects(edits, says):
    rejects(checks.check_softmax_xent_kernel, mutated(L.softmax_xent_kernel, *edits), "Exercise 3.1", says)


def test_softmax_check_cases_are_random_odd_and_include_large_logits(monkeypatch):
    cases = []
    monkeypatch.setattr(checks, "run_cases", lambda ex, k, c, **kw: cases.extend(c))
    checks.check_softmax_xent_kernel(L.softmax_xent_kernel)
    assert len({c["block"] for c in cases}) >= 2
    assert sum(c["inputs"][0].shape[0] % c["block"] != 0 for c in cases) >= 4  # the last block sticks out
    assert any(c["inputs"][0].shape[0] % c["block"] == 0 for c in cases)        # and every block full
    for c in cases:
        z = c["inputs"][0]
        assert len(np.unique(z)) > z.size // 2
    assert any(np.abs(c["inputs"][0]).max() > 89 for c in cases)  # exp overflows float32 above 88.7
    assert any((c["inputs"][0].max(axis=1) < -104).any() for c in cases)  # a whole row underflows
    lead = [z[:, -1] - z[:, :-1].max(axis=1) for z in (c["inputs"][0] for c in cases)]
    assert any((d > 89).any() for d in lead)  # the last logit leads by more than exp can take: a max must see it


# --- Exercise 3.2: planted wrong reductions ---------------------------------------------------------------

LOAD_BARRIER = "    cuda.syncthreads()                                    # every cell"
BARRIER = "            s[tid] += s[tid + half]\n        cuda.syncthreads()"
NO_SYNC_IN_TREE = (BARRIER, "            s[tid] += s[tid + half]\n        pass")
PLAIN_ADD = ("cuda.atomic.add(total, 0, s[0])", "total[0] += s[0]")  # a race between blocks on a GPU only


@pytest.mark.parametrize("edits, says", [
    bug("no bounds guard", ["out-of-bounds", "total[0] should be"], ("if i < x.size:", "if True:")),
    bug("off by one", ["out-of-bounds", "total[0] should be"], ("i < x.size", "i <= x.size")),
    # rounds down: at an odd step, cell step - 1 is never added
    bug("half rounds down", ["round down"], ("(step + 1) // 2", "step // 2"),
        ("if tid + half < step:", "if tid < half:")),
    # the last block to finish wins; the start value and every other block are lost
    bug("overwrites total", ["overwritten"], ("cuda.atomic.add(total, 0, s[0])", "total[0] = s[0]")),
    # the caller's job; here it also races with blocks that already added their sum
    bug("resets total", ["overwritten", "total[0] should be"],
        ("i = cuda.grid(1)", "i = cuda.grid(1)\n    if i == 0:\n        total[0] = 0")),
])
def test_sum_check_rejects_by_value(edits, says):
    rejects(checks.check_sum_kernel, mutated(L.sum_kernel, *edits), "Exercise 3.2", says)


# Threads past the end of x that leave their shared cell as it was. The devices truly differ here: the simulator's
# shared memory starts as NaN (the check's instruments), a GPU's holds whatever an earlier block or kernel left (0
# in a fresh context, x's values later: the H100 said "overwritten" of a total 253 too large, wrongly).
UNZEROED = "shared cells of threads past the end of x did not hold 0"
NAN_READ = "NaN: a tree step read a shared cell"


def test_sum_check_rejects_no_zero_padding_as_each_device_sees_it():
    msg = rejects(checks.check_sum_kernel, mutant(L.sum_kernel, "s[tid] = np.float32(0.0)", "pass"), "Exercise 3.2",
                  [NAN_READ] if course.SIMULATOR else [UNZEROED, NAN_READ])  # a GPU: garbage, or the simulator's eyes
    assert "overwritten" not in msg, msg


def test_sum_check_names_stale_cells_past_the_end():
    """A GPU's stale shared memory, emulated on any device: the cells past the end of x hold 1.0 (an earlier
    block's x, about 1): too much by that, and the message says where it comes from."""
    msg = rejects(checks.check_sum_kernel, mutant(L.sum_kernel, "s[tid] = np.float32(0.0)", "s[tid] = np.float32(1.0)"),
                  "Exercise 3.2", [UNZEROED])
    assert "too much" in msg and "overwritten" not in msg, msg


def test_sum_diagnosis_says_overwritten_only_when_the_total_fits():
    """The H100's case (n=1,000,003, block 256, start -10.072): 253.47 too much is garbage, not an overwrite;
    one block's sum or the sum without the start, to float32's rounding, is one."""
    x = np.random.default_rng(0).uniform(0.5, 1.5, 1_000_003).astype(np.float32)
    start, block = -10.072, 256
    grid = -(-x.size // block)
    want = start + float(x.astype(np.float64).sum())

    def say(got, nan_filled=False):
        return checks._sum_diagnosis(got, want, start, x, block, grid, nan_filled)

    for wrong in (want + 253.47, want - start + 50, want - 40):
        assert "overwritten" not in say(wrong) and UNZEROED in say(wrong), say(wrong)
    signs = checks._sum_diagnosis(want + 253.47, want, start, x - np.float32(1), block, grid, False)
    assert "both signs" in signs and UNZEROED in signs, signs  # every partial case names the cells past the end
    assert "overwritten" in say(float(np.float32(x[-(x.size % block):].sum())))  # the last block's sum
    assert "overwritten" in say(float(np.float32(want - start)))                 # every block's, without the start
    assert "the check fills shared memory with NaN" in say(float("nan"), nan_filled=True)
    assert "the check fills" not in say(float("nan")) and "holds whatever was there before" in say(float("nan"))


@pytest.mark.parametrize("edits", [
    pytest.param([(LOAD_BARRIER, "    pass  # missing: cuda.syncthreads()")], id="no syncthreads after the load"),
    pytest.param([NO_SYNC_IN_TREE], id="no syncthreads in the tree"),
])
def test_sum_check_rejects_missing_syncthreads(edits):
    # In the simulator: caught because the check fills shared memory with NaN (thread 0 runs ahead of the others
    # and reads cells nobody has written). Without that, a missing barrier after the load gave the right sum in
    # about a third of our simulator runs. On a GPU it is caught only when the warps' timing exposes the race, and
    # on an H200 the missing barrier after the load went unnoticed by the GPU's run: the check's run of its
    # smallest odd case in the simulator (on a GPU too: core.simulator_eyes) catches it there.
    msg = rejects(checks.check_sum_kernel, mutated(L.sum_kernel, *edits), "Exercise 3.2", ["total[0] should be"])
    if course.SIMULATOR:
        assert "syncthreads" in msg


def test_sum_check_rejects_missing_atomic():
    # The race of a plain += between blocks happens only on a GPU; the simulator runs blocks one after another and
    # the total comes out right. The check rejects it anyway: no atomic add counted (simulator), and no atomic in
    # the kernel's code (both).
    rejects(checks.check_sum_kernel, mutant(L.sum_kernel, *PLAIN_ADD), "Exercise 3.2", ["atomic"])


def test_sum_check_rejects_an_atomic_per_element():
    # Right total, wrong design (no tree); the simulator's atomic count sees it, a GPU run would pass it.
    if course.SIMULATOR:
        # every thread adds its element atomically; the tree's result is dropped
        wrong = mutated(L.sum_kernel, ("s[tid] = x[i]", "s[tid] = x[i]; cuda.atomic.add(total, 0, x[i])"),
                        ("cuda.atomic.add(total, 0, s[0])", "pass"))
        rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", ["atomic adds for"])


def test_the_simulator_instruments_are_removed_afterwards():
    before = None
    if course.SIMULATOR:
        from numba.cuda.simulator import kernelapi
        before = (kernelapi.FakeCUDAShared.array, kernelapi.FakeCUDALocal.array, kernelapi.FakeCUDAAtomic.add)
        with pytest.raises(CheckFailure):  # on a GPU this race need not show (measured: it did not, on an H200)
            checks.check_sum_kernel(mutant(L.sum_kernel, *NO_SYNC_IN_TREE))
    if before is not None:
        from numba.cuda.simulator import kernelapi
        assert (kernelapi.FakeCUDAShared.array, kernelapi.FakeCUDALocal.array,
                kernelapi.FakeCUDAAtomic.add) == before
        # and an ordinary kernel afterwards sees ordinary (not NaN-filled) shared memory that it writes itself
        total = cuda.to_device(np.zeros(1, np.float32))
        L.sum_kernel[2, 32](cuda.to_device(np.ones(50, np.float32)), total)
        assert total.copy_to_host()[0] == 50


def test_sum_check_uses_blocks_that_are_not_powers_of_two(monkeypatch):
    shapes = []
    real = core.launch  # every case's launch goes through core.launch (ON_THIS_DEVICE)

    def spy(ex, case, kernel, grid, block, args, hint):
        shapes.append((grid, block))
        return real(ex, case, kernel, grid, block, args, hint)

    monkeypatch.setattr(core, "launch", spy)
    checks.check_sum_kernel(L.sum_kernel)
    assert any(b & (b - 1) for _, b in shapes) and len({b for _, b in shapes}) >= 2
    assert any(g > 1 for g, _ in shapes)


# --- Exercise 3.3: planted wrong launchers for the mean ---------------------------------------------------

SUM = "block_sum[cdiv(n, THREADS), THREADS, stream](x, out)"   # the solution launches registry.pick("3.2", sum_kernel)
DIV = "div_kernel[1, 1, stream](out, np.float32(n))"


@pytest.mark.parametrize("edits, says", [
    bug("forgets / n", ["that is the sum"], (DIV, "pass")),
    bug("forgets to zero out", ["reset out", "was out reset", "the mean of x is"],  # GPU: junk in out shows by value
        ("zero_kernel[1, 1, stream](out)", "pass")),
    # floor: the last, part-full block is never launched
    bug("floor grid", ["cdiv", "batch_mean raised"], (SUM, "block_sum[max(n // 128, 1), 128, stream](x, out)")),
    bug("mean on the host", ["copied an array to the host"],
        (SUM, "out.copy_to_device(np.array([x.copy_to_host().mean()], np.float32))"), (DIV, "pass")),
    # ignores out: the caller's buffer is never filled
    bug("new array each time", ["did not return the `out`"], ("if out is None:", "if True:")),
    bug("divides by the block count", ["expected", "too large", "out holds"],
        ("np.float32(n))", "np.float32(cdiv(n, THREADS)))")),
    # the stream argument, which notebook 08 (08_time) records launches through, is accepted but not used
    bug("sum on the default stream", ["sum_kernel was launched on the default stream"],
        (SUM, "block_sum[cdiv(n, THREADS), THREADS](x, out)")),
    bug("every launch on the default stream", ["zero_kernel was launched on the default stream"],
        (", stream](", "](", 3)),
    bug("divides by n - 1", ["the sum was divided by n - 1"], ("np.float32(n))", "np.float32(n - 1))")),
])
def test_mean_check_rejects(edits, says):
    rejects(checks.check_batch_mean, mutated(L.batch_mean, *edits), "Exercise 3.3", says)


# --- the stubs of the student notebook ----------------------------------------------------------------------

def test_unimplemented_stubs_raise_the_exercise_message():
    @cuda.jit
    def stub_kernel(x, total):
        raise NotImplementedError("Exercise 3.2: the block reduction")

    def stub_mean(x, out=None):
        raise NotImplementedError("Exercise 3.3: the mean on the device")

    with pytest.raises(NotImplementedError, match="Exercise 3.2"):
        checks.check_sum_kernel(stub_kernel)
    with pytest.raises(NotImplementedError, match="Exercise 3.3"):
        checks.check_batch_mean(stub_mean)


# --- classes that once passed, planted as one-line mutations (tests/conftest.py: mutant) ------------------

def test_max_that_skips_the_last_logit_rejected():
    wrong = mutant(L.softmax_xent_kernel, "for c in range(1, C):", "for c in range(1, C - 1):")
    rejects(checks.check_softmax_xent_kernel, wrong, "Exercise 3.1", ["never written", "NaN", "expected", "inf"])



def test_barrier_inside_a_divergent_branch_rejected():
    """The simulator sees which barriers each thread reaches; on a GPU the check reads the kernel's code."""
    wrong = mutant(L.sum_kernel, BARRIER, "            s[tid] += s[tid + half]\n            cuda.syncthreads()")
    says = ["must reach the same cuda.syncthreads()", "depends on the thread"]
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", says)
    early = mutant(L.sum_kernel, "    cuda.syncthreads()                                    # every cell",
                   "    if i >= x.size:\n        return\n    cuda.syncthreads()                                    # every cell")
    rejects(checks.check_sum_kernel, early, "Exercise 3.2", says + ["short by"])


def test_divergent_barriers_are_found_in_the_code():
    from course.checks.core import divergent_barriers
    assert divergent_barriers(L.sum_kernel) == []
    wrong = mutant(L.sum_kernel, BARRIER, "            s[tid] += s[tid + half]\n            cuda.syncthreads()")
    assert len(divergent_barriers(wrong)) == 1
    uniform = mutant(L.sum_kernel, "    cuda.syncthreads()                                    # every cell",
                     "    if cuda.blockDim.x > 1:\n        cuda.syncthreads()  # every cell")   # the same for every thread: fine
    assert divergent_barriers(uniform) == []


@pytest.mark.skipif(not course.SIMULATOR, reason="the simulator measures shared arrays; on a GPU this may fault")
def test_shared_array_smaller_than_the_block_rejected():
    wrong = mutant(L.sum_kernel, "cuda.shared.array(MAX_BLOCK, np.float32)", "cuda.shared.array(128, np.float32)")
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", ["cells for a block of 256 threads", "out-of-bounds"])


@pytest.mark.parametrize("old, new, says", [
    (SUM, "block_sum[THREADS, cdiv(n, THREADS), stream](x, out)",
     ["the grid comes first"]),
    (SUM, "block_sum[1, n, stream](x, out)",
     ["block size changes with n", "at most 1024", "CUDA_ERROR_INVALID_VALUE"]),  # a GPU refuses the launch itself
    ("zero_kernel[1, 1, stream](out)", "out.copy_to_device(np.zeros(1, np.float32))", ["copied an array from the host"]),
    ("zero_kernel[1, 1, stream](out)", "out[:] = 0", ["copied values from the host"]),
    ("div_kernel[1, 1, stream](out, np.float32(n))", "out.copy_to_device(out.copy_to_host() / n)",
     ["copied an array to the host"]),
])
def test_mean_launch_and_copies_rejected(old, new, says):
    rejects(checks.check_batch_mean, mutant(L.batch_mean, old, new), "Exercise 3.3", says)


def test_mean_with_another_block_size_passes(capsys):
    other = mutant(L.batch_mean, SUM, "block_sum[cdiv(n, 128), 128, stream](x, out)")
    checks.check_batch_mean(other)
    assert "✓ Exercise 3.3 passed" in capsys.readouterr().out


def test_reduction_that_reduces_in_x_itself_rejected():
    wrong = mutant(L.sum_kernel, "        s[tid] = x[i]\n", "        s[tid] = x[i]\n        x[i] = np.float32(0.0)\n")
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", ["wrote into its input x"])


# --- answers that fit only the notebook's inputs (sizes, values, one call), planted before the check
# changed: a row guard hard-coded to the notebook's batch (64), a sum that adds only positive values (the spec
# allows any float32), a launcher that caches its result across calls ---

def test_softmax_row_guard_hard_coded_to_the_batch_rejected():
    wrong = mutant(L.softmax_xent_kernel, "r < logits.shape[0]", "r < min(logits.shape[0], 64)")
    rejects(checks.check_softmax_xent_kernel, wrong, "Exercise 3.1", ["never written"])


@pytest.mark.parametrize("edits", [
    pytest.param([("s[tid] = x[i]", "s[tid] = max(x[i], np.float32(0.0))")], id="loads only positive values"),
    pytest.param([("cuda.atomic.add(total, 0, s[0])", "if s[0] > 0:\n            cuda.atomic.add(total, 0, s[0])")],
                 id="adds a block's sum only when positive"),
])
def test_sum_of_positive_values_only_rejected(edits):
    rejects(checks.check_sum_kernel, mutated(L.sum_kernel, *edits), "Exercise 3.2", ["total[0] should be"])


def test_mean_cached_across_calls_rejected():
    # the first out computed for a length comes back for every later call of that length, whatever x holds
    wrong = mutant(L.batch_mean, "return out", "return _CACHE.setdefault(n, out)", scope={"_CACHE": {}})
    rejects(checks.check_batch_mean, wrong, "Exercise 3.3", ["the mean of x is", "did not return"])
