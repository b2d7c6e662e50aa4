"""Notebook 08's checks pass the solutions and reject planted wrong answers."""
import numpy as np
import pytest
from conftest import mutant

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from numba import cuda  # noqa: E402
from course.checks import CheckFailure
from course.checks import time as checks
from course.graphs import batch_index_kernel
from course.perf import epoch_cost


def test_solutions_pass():
    checks.check_epoch_cost(epoch_cost)
    checks.check_batch_index(batch_index_kernel)


def test_a_different_correct_answer_passes():
    def epoch_cost_other(n_train, n_in, hidden, n_out, batch_size):
        """Counted per layer: weights then biases, forward and backward apart."""
        steps = n_train // batch_size
        weights, biases = n_in * hidden + hidden * n_out, hidden + n_out
        flops = (2 * weights + 2 * n_in * hidden + 4 * hidden * n_out) * batch_size * steps
        flops += 2 * (weights + biases) * steps
        return flops, 4 * n_in * batch_size * steps + 12 * (weights + biases) * steps
    checks.check_epoch_cost(epoch_cost_other)


@cuda.jit
def batch_index_while(perm, counter, idx):
    """A different correct kernel: a while loop, the batch's start worked out inside."""
    i = cuda.threadIdx.x
    while i < idx.size:
        idx[i] = perm[counter[0] * idx.size + i]
        i += cuda.blockDim.x


def test_a_different_correct_kernel_passes():
    checks.check_batch_index(batch_index_while)


# --- Exercise 8.1: planted wrong counts (one line of the solution changed) -------------------------------------

def test_epoch_cost_check_rejects_floats():
    with pytest.raises(CheckFailure, match="two Python integers"):
        checks.check_epoch_cost(lambda *a: tuple(float(v) for v in epoch_cost(*a)))


@pytest.mark.parametrize("old, new", [
    pytest.param("n_train // batch_size", "n_train / batch_size", id="partial batch counted"),
    pytest.param("seen * (forward + backward)", "n_train * (forward + backward)", id="the dropped examples' passes counted"),
    pytest.param("4 * (seen * n_in", "4 * (n_train * n_in", id="the dropped examples' images counted"),
    pytest.param("hidden + hidden * n_out + n_out", "hidden * n_out", id="biases forgotten"),
    pytest.param("2 * 2 * hidden * n_out", "2 * hidden * n_out", id="dH forgotten"),
    pytest.param("+ steps * 2 * params", "+ steps * params", id="update: one FLOP a parameter"),
    pytest.param("seen * n_in + steps * 3 * params", "seen * n_in + steps * 2 * params", id="gradient read forgotten"),
    pytest.param("4 * (seen * n_in +", "(seen * n_in + 4 *", id="images as bytes"),
])
def test_epoch_cost_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 8.1"):
        checks.check_epoch_cost(mutant(epoch_cost, old, new))


# --- the spec's letter (Python integers) and an epoch of no whole batch -----------------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("steps = n_train // batch_size", "steps = np.int64(n_train) // batch_size", id="NumPy integers"),
    pytest.param("steps = n_train // batch_size", "steps = max(1, n_train // batch_size)", id="at least one step"),
])
def test_epoch_cost_check_rejects_issue48(old, new):
    with pytest.raises(CheckFailure, match="Exercise 8.1"):
        checks.check_epoch_cost(mutant(epoch_cost, old, new, scope={"np": np}))


# --- Exercise 8.2: planted wrong index kernels ----------------------------------------------------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("counter[0] * idx.shape[0]", "counter[0]", id="batch number as an offset"),
    pytest.param("counter[0] * idx.shape[0]", "(counter[0] + 1) * idx.shape[0]", id="the next batch"),
    pytest.param("range(cuda.threadIdx.x, idx.shape[0], cuda.blockDim.x)", "range(cuda.threadIdx.x, idx.shape[0], 2 * cuda.blockDim.x)",
                 id="strides past rows"),
    pytest.param("range(cuda.threadIdx.x, idx.shape[0], cuda.blockDim.x)", "range(cuda.threadIdx.x, cuda.blockDim.x, cuda.blockDim.x)",
                 id="one pass of the block"),
    pytest.param("perm[base + i]", "perm[base + i + 1]", id="off by one"),
    pytest.param("range(cuda.threadIdx.x, idx.shape[0], cuda.blockDim.x)", "range(cuda.threadIdx.x, idx.shape[0], 32)",
                 id="a warp's stride, not the block's"),  # a fresh student's: passed while every block had >= 32 threads
])
def test_batch_index_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 8.2"):
        checks.check_batch_index(mutant(batch_index_kernel, old, new))


def test_batch_index_failure_prints_plain_numbers():
    """A fresh student's report: the values came out as NumPy 2's repr (`expected np.int64(16)`); plain numbers."""
    with pytest.raises(CheckFailure, match=r"expected \d+, got \d+ \(") as e:
        checks.check_batch_index(mutant(batch_index_kernel, "perm[base + i]", "perm[base + i + 1]"))  # off by one
    assert "np." not in str(e.value), str(e.value)
