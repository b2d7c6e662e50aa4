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
import math

import numpy as np
import pytest
from conftest import rejects
from numba import cuda

import course
from course import loss as L
from course.checks import CheckFailure
from course.checks import loss as checks
from course.util import cdiv


def test_solutions_pass():
    checks.check_softmax_xent_kernel(L.softmax_xent_kernel)
    checks.check_sum_kernel(L.sum_kernel)
    checks.check_batch_mean(L.batch_mean)


# --- Exercise 3.1: planted wrong softmax kernels ----------------------------------------------------------

@cuda.jit
def softmax_unstable(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c])  # no max subtracted: exp(100) is inf, a row below -104 sums to 0
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c]) / s
        losses[r] = math.log(s) - logits[r, y[r]]


@cuda.jit
def softmax_max_starts_at_zero(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        m = np.float32(0.0)  # wrong for a row whose logits are all far below 0
        for c in range(logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = math.log(s) - (logits[r, y[r]] - m)


@cuda.jit
def softmax_loss_from_prob(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        m = logits[r, 0]
        for c in range(1, logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = -math.log(max(probs[r, y[r]], np.float32(1e-45)))  # p underflows: -log 0 (or a clamp) is wrong


@cuda.jit
def softmax_no_guard(logits, y, probs, losses):
    r = cuda.grid(1)
    m = logits[r, 0]
    for c in range(1, logits.shape[1]):
        m = max(m, logits[r, c])
    s = np.float32(0.0)
    for c in range(logits.shape[1]):
        s += math.exp(logits[r, c] - m)
    for c in range(logits.shape[1]):
        probs[r, c] = math.exp(logits[r, c] - m) / s
    losses[r] = math.log(s) - (logits[r, y[r]] - m)


@cuda.jit
def softmax_off_by_one(logits, y, probs, losses):
    r = cuda.grid(1)
    if r <= logits.shape[0]:
        m = logits[r, 0]
        for c in range(1, logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = math.log(s) - (logits[r, y[r]] - m)


@cuda.jit
def softmax_skips_last_row(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0] - 1:
        m = logits[r, 0]
        for c in range(1, logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = math.log(s) - (logits[r, y[r]] - m)


@cuda.jit
def softmax_skips_last_column(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        C = logits.shape[1] - 1  # off by one in the columns: the last one is neither summed nor written
        m = logits[r, 0]
        for c in range(1, C):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(C):
            s += math.exp(logits[r, c] - m)
        for c in range(C):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = math.log(s) - (logits[r, y[r]] - m)


@cuda.jit
def softmax_loss_forgets_log_s(logits, y, probs, losses):
    r = cuda.grid(1)
    if r < logits.shape[0]:
        m = logits[r, 0]
        for c in range(1, logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = m - logits[r, y[r]]


@cuda.jit
def softmax_thread_index_only(logits, y, probs, losses):
    r = cuda.threadIdx.x  # forgets blockIdx: rows past the first block are never written
    if r < logits.shape[0]:
        m = logits[r, 0]
        for c in range(1, logits.shape[1]):
            m = max(m, logits[r, c])
        s = np.float32(0.0)
        for c in range(logits.shape[1]):
            s += math.exp(logits[r, c] - m)
        for c in range(logits.shape[1]):
            probs[r, c] = math.exp(logits[r, c] - m) / s
        losses[r] = math.log(s) - (logits[r, y[r]] - m)


@pytest.mark.parametrize("kernel, says", [
    (softmax_unstable, ["overflowed", "log of 0"]),     # fails only on the large-logit cases
    (softmax_max_starts_at_zero, ["overflowed", "log of 0"]),  # fails only on the rows far below 0
    (softmax_loss_from_prob, ["overflowed"]),           # fails only where z_y is far below the max
    (softmax_no_guard, ["outside the output", "out-of-bounds"]),
    (softmax_off_by_one, ["outside the output", "out-of-bounds"]),
    (softmax_skips_last_row, ["never written"]),
    (softmax_skips_last_column, ["never written"]),
    (softmax_loss_forgets_log_s, ["expected"]),
    (softmax_thread_index_only, ["never written"]),
])
def test_softmax_check_rejects(kernel, says):
    rejects(checks.check_softmax_xent_kernel, kernel, "Exercise 3.1", says)


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

MAX_BLOCK = L.MAX_BLOCK


@cuda.jit
def sum_no_guard(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    s[tid] = x[i]  # threads past the end read outside x
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_off_by_one(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i <= x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_no_zero_padding(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]  # threads past the end leave their cell as it was: garbage on a GPU, NaN in the check
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_no_sync_after_load(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    step = cuda.blockDim.x  # missing: cuda.syncthreads()
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_no_sync_in_tree(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        step = half  # missing: cuda.syncthreads()
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_drops_odd_tail(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = step // 2  # rounds down: at an odd step, cell step - 1 is never added
        if tid < half:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_overwrites_total(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        total[0] = s[0]  # the last block to finish wins; the start value and every other block are lost


@cuda.jit
def sum_plain_add(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        total[0] += s[0]  # a race between blocks on a GPU; exact in the simulator, which runs blocks in turn


@cuda.jit
def sum_atomic_per_element(x, total):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(total, 0, x[i])  # right total, but no tree: every thread hammers one address


@cuda.jit
def sum_resets_total(x, total):
    s = cuda.shared.array(MAX_BLOCK, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    if i == 0:
        total[0] = 0  # the caller's job; here it also races with blocks that already added their sum
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = np.float32(0.0)
    cuda.syncthreads()
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@pytest.mark.parametrize("kernel, says", [
    (sum_no_guard, ["out-of-bounds", "total[0] should be"]),
    (sum_off_by_one, ["out-of-bounds", "total[0] should be"]),
    (sum_no_zero_padding, ["NaN"]),
    (sum_drops_odd_tail, ["round down"]),
    (sum_overwrites_total, ["overwritten"]),
    (sum_resets_total, ["overwritten", "total[0] should be"]),
])
def test_sum_check_rejects_by_value(kernel, says):
    rejects(checks.check_sum_kernel, kernel, "Exercise 3.2", says)


@pytest.mark.parametrize("kernel", [sum_no_sync_after_load, sum_no_sync_in_tree])
def test_sum_check_rejects_missing_syncthreads(kernel):
    # In the simulator: caught because the check fills shared memory with NaN (thread 0 runs ahead of the others
    # and reads cells nobody has written). Without that, a missing barrier after the load gave the right sum in
    # about a third of our simulator runs. On a GPU it is caught only when the warps' timing exposes the race, and
    # on an H200 the missing barrier after the load went unnoticed: compute-sanitizer's racecheck is the GPU tool.
    if not course.SIMULATOR and kernel is sum_no_sync_after_load:
        pytest.skip("this race did not show on an H200 at these sizes; the simulator run asserts it")
    msg = rejects(checks.check_sum_kernel, kernel, "Exercise 3.2", ["total[0] should be"])
    if course.SIMULATOR:
        assert "syncthreads" in msg


def test_sum_check_rejects_missing_atomic():
    # The race of a plain += between blocks happens only on a GPU; the simulator runs blocks one after another and
    # the total comes out right. The check rejects it anyway: no atomic add counted (simulator), and no atomic in
    # the kernel's code (both).
    rejects(checks.check_sum_kernel, sum_plain_add, "Exercise 3.2", ["atomic"])


def test_sum_check_rejects_an_atomic_per_element():
    # Right total, wrong design (no tree); the simulator's atomic count sees it, a GPU run would pass it.
    if course.SIMULATOR:
        rejects(checks.check_sum_kernel, sum_atomic_per_element, "Exercise 3.2", ["atomic adds for"])


def test_the_simulator_instruments_are_removed_afterwards():
    before = None
    if course.SIMULATOR:
        from numba.cuda.simulator import kernelapi
        before = (kernelapi.FakeCUDAShared.array, kernelapi.FakeCUDALocal.array, kernelapi.FakeCUDAAtomic.add)
        with pytest.raises(CheckFailure):  # on a GPU this race need not show (measured: it did not, on an H200)
            checks.check_sum_kernel(sum_no_sync_in_tree)
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
    real = checks.launch

    def spy(ex, case, kernel, grid, block, args, hint):
        shapes.append((grid, block))
        return real(ex, case, kernel, grid, block, args, hint)

    monkeypatch.setattr(checks, "launch", spy)
    checks.check_sum_kernel(L.sum_kernel)
    assert any(b & (b - 1) for _, b in shapes) and len({b for _, b in shapes}) >= 2
    assert any(g > 1 for g, _ in shapes)


# --- Exercise 3.3: planted wrong launchers for the mean ---------------------------------------------------

def mean_forgets_division(x, out=None):
    out = cuda.device_array(1, np.float32) if out is None else out
    L.zero_kernel[1, 1](out)
    L.sum_kernel[cdiv(x.shape[0], L.THREADS), L.THREADS](x, out)
    return out


def mean_forgets_zeroing(x, out=None):
    out = cuda.device_array(1, np.float32) if out is None else out
    n = x.shape[0]
    L.sum_kernel[cdiv(n, L.THREADS), L.THREADS](x, out)
    L.div_kernel[1, 1](out, np.float32(n))
    return out


def mean_floor_grid(x, out=None):
    out = cuda.device_array(1, np.float32) if out is None else out
    n = x.shape[0]
    L.zero_kernel[1, 1](out)
    L.sum_kernel[max(n // 128, 1), 128](x, out)  # floor: the last, part-full block is never launched
    L.div_kernel[1, 1](out, np.float32(n))
    return out


def mean_on_the_host(x, out=None):
    out = cuda.device_array(1, np.float32) if out is None else out
    out.copy_to_device(np.array([x.copy_to_host().mean()], np.float32))
    return out


def mean_new_array_each_time(x, out=None):
    return L.batch_mean(x)  # ignores out: the caller's buffer is never filled


def mean_divides_by_blocks(x, out=None):
    out = cuda.device_array(1, np.float32) if out is None else out
    n = x.shape[0]
    L.zero_kernel[1, 1](out)
    L.sum_kernel[cdiv(n, L.THREADS), L.THREADS](x, out)
    L.div_kernel[1, 1](out, np.float32(cdiv(n, L.THREADS)))
    return out


@pytest.mark.parametrize("fn, says", [
    (mean_forgets_division, ["that is the sum"]),
    (mean_forgets_zeroing, ["reset out", "was out reset", "the mean of x is"]),  # GPU: junk in out shows by value
    (mean_floor_grid, ["cdiv", "batch_mean raised"]),
    (mean_on_the_host, ["copied an array to the host"]),
    (mean_new_array_each_time, ["did not return the `out`"]),
    (mean_divides_by_blocks, ["expected", "too large", "out holds"]),
])
def test_mean_check_rejects(fn, says):
    rejects(checks.check_batch_mean, fn, "Exercise 3.3", says)


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
    from conftest import mutant
    wrong = mutant(L.softmax_xent_kernel, "for c in range(1, C):", "for c in range(1, C - 1):")
    rejects(checks.check_softmax_xent_kernel, wrong, "Exercise 3.1", ["never written", "NaN", "expected", "inf"])


BARRIER = "            s[tid] += s[tid + half]\n        cuda.syncthreads()"


def test_barrier_inside_a_divergent_branch_rejected():
    """The simulator sees which barriers each thread reaches; on a GPU the check reads the kernel's code."""
    from conftest import mutant
    wrong = mutant(L.sum_kernel, BARRIER, "            s[tid] += s[tid + half]\n            cuda.syncthreads()")
    says = ["must reach the same cuda.syncthreads()", "depends on the thread"]
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", says)
    early = mutant(L.sum_kernel, "    cuda.syncthreads()                                    # every cell",
                   "    if i >= x.size:\n        return\n    cuda.syncthreads()                                    # every cell")
    rejects(checks.check_sum_kernel, early, "Exercise 3.2", says + ["short by"])


def test_divergent_barriers_are_found_in_the_code():
    from conftest import mutant
    from course.checks.core import divergent_barriers
    assert divergent_barriers(L.sum_kernel) == []
    wrong = mutant(L.sum_kernel, BARRIER, "            s[tid] += s[tid + half]\n            cuda.syncthreads()")
    assert len(divergent_barriers(wrong)) == 1
    uniform = mutant(L.sum_kernel, "    cuda.syncthreads()                                    # every cell",
                     "    if cuda.blockDim.x > 1:\n        cuda.syncthreads()  # every cell")   # the same for every thread: fine
    assert divergent_barriers(uniform) == []


@pytest.mark.skipif(not course.SIMULATOR, reason="the simulator measures shared arrays; on a GPU this may fault")
def test_shared_array_smaller_than_the_block_rejected():
    from conftest import mutant
    wrong = mutant(L.sum_kernel, "cuda.shared.array(MAX_BLOCK, np.float32)", "cuda.shared.array(128, np.float32)")
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", ["cells for a block of 256 threads", "out-of-bounds"])


@pytest.mark.parametrize("old, new, says", [
    ("sum_kernel[cdiv(n, THREADS), THREADS, stream](x, out)", "sum_kernel[THREADS, cdiv(n, THREADS), stream](x, out)",
     ["the grid comes first"]),
    ("sum_kernel[cdiv(n, THREADS), THREADS, stream](x, out)", "sum_kernel[1, n, stream](x, out)",
     ["block size changes with n", "at most 1024", "CUDA_ERROR_INVALID_VALUE"]),  # a GPU refuses the launch itself
    ("zero_kernel[1, 1, stream](out)", "out.copy_to_device(np.zeros(1, np.float32))", ["copied an array from the host"]),
    ("zero_kernel[1, 1, stream](out)", "out[:] = 0", ["copied values from the host"]),
    ("div_kernel[1, 1, stream](out, np.float32(n))", "out.copy_to_device(out.copy_to_host() / n)",
     ["copied an array to the host"]),
])
def test_mean_launch_and_copies_rejected(old, new, says):
    from conftest import mutant
    rejects(checks.check_batch_mean, mutant(L.batch_mean, old, new), "Exercise 3.3", says)


def test_mean_with_another_block_size_passes(capsys):
    from conftest import mutant
    other = mutant(L.batch_mean, "sum_kernel[cdiv(n, THREADS), THREADS, stream](x, out)", "sum_kernel[cdiv(n, 128), 128, stream](x, out)")
    checks.check_batch_mean(other)
    assert "✓ Exercise 3.3 passed" in capsys.readouterr().out


def test_reduction_that_reduces_in_x_itself_rejected():
    from conftest import mutant
    wrong = mutant(L.sum_kernel, "        s[tid] = x[i]\n", "        s[tid] = x[i]\n        x[i] = np.float32(0.0)\n")
    rejects(checks.check_sum_kernel, wrong, "Exercise 3.2", ["wrote into its input x"])
