"""Notebooks 10 and 15 (the appendix): their checks pass the solutions and reject planted wrong kernels."""
import pytest
from conftest import mutant
from numba import cuda

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import perf as checks
from course.matmul import matmul_v3_kernel
from course.merged import sgd_gridstride_kernel


def test_solutions_pass():
    checks.check_matmul_v3(matmul_v3_kernel)
    checks.check_sgd_gridstride(sgd_gridstride_kernel)


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----

# --- Exercise 15.1: planted wrong inner products (the rest of the kernel as in the solution) -----------------

@pytest.mark.parametrize("old, new", [
    pytest.param("a[i] * b[j]", "a[i] * b[i]", id="b[i] for b[j]"),  # a plausible typo
    # a thread's rows taken as ty*TM + i: not the rows the epilogue writes
    pytest.param("sA[kk, ty + TY * i]", "sA[kk, ty * TM + i]", id="contiguous rows"),
    # the last column of each tile is skipped
    pytest.param("for kk in range(BK):", "for kk in range(BK - 1):", id="short k (BK - 1)"),
    # writes every acc, also outside C
    pytest.param("if row < C.shape[0] and col < C.shape[1]:", "if True:", id="no epilogue guard"),
])
def test_matmul_v3_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 15.1"):
        checks.check_matmul_v3(mutant(matmul_v3_kernel, old, new))


# --- Exercise 10.1: planted wrong grid-stride loops -----------------------------------------------------------

@pytest.mark.parametrize("old, new", [
    # one element per thread: a grid too small leaves elements untouched
    pytest.param("range(cuda.grid(1), p.size, cuda.gridsize(1))", "range(cuda.grid(1), min(cuda.grid(1) + 1, p.size))",
                 id="no loop"),
    # strides by the block, not the grid: elements updated by several blocks
    pytest.param("cuda.gridsize(1)", "cuda.blockDim.x", id="block stride"),
    # starts at threadIdx.x: every block repeats block 0's elements
    pytest.param("range(cuda.grid(1),", "range(cuda.threadIdx.x,", id="local start"),
    pytest.param("p.size,", "p.size - 1,", id="off by one (stops one short)"),
    pytest.param("p.size,", "p.size + 1,", id="past the end"),  # <= instead of <: one element past the end
])
def test_sgd_gridstride_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 10.1"):
        checks.check_sgd_gridstride(mutant(sgd_gridstride_kernel, old, new))


@pytest.mark.parametrize("old, new", [
    pytest.param("p[i] -= lr * g[i]", "p[i] += lr * g[i]", id="+= for -="),      # up the gradient
    pytest.param("lr * g[i]", "g[i]", id="lr missing"),                          # a step of the whole gradient
])
def test_sgd_gridstride_wrong_update_hints_at_the_update_not_the_loop(old, new):
    """Every element updated once, by the wrong amount: the hint is about the update itself, not the loop's start
    and stride (a fresh student's report: the loop hint sent them to a loop that was right)."""
    with pytest.raises(CheckFailure, match="Exercise 10.1") as e:
        checks.check_sgd_gridstride(mutant(sgd_gridstride_kernel, old, new))
    msg = str(e.value)
    assert checks.FORMULA_HINT_10_1 in msg and checks.LOOP_HINT_10_1 not in msg, msg
    assert "lr * g" not in msg and "-=" not in msg, msg  # prose, not the solution's line


def test_sgd_gridstride_repeated_updates_keep_the_loop_hint():
    """Elements updated by several threads (a stride by the block): every element changed, but by whole repeats of
    the right step: the loop's fault, so the loop's hint."""
    with pytest.raises(CheckFailure, match="Exercise 10.1") as e:
        checks.check_sgd_gridstride(mutant(sgd_gridstride_kernel, "cuda.gridsize(1)", "cuda.blockDim.x"))
    assert checks.LOOP_HINT_10_1 in str(e.value) and checks.FORMULA_HINT_10_1 not in str(e.value), str(e.value)


def test_unimplemented_raises_not_implemented():
    @cuda.jit
    def stub(p, g, lr):
        raise NotImplementedError("Exercise 10.1: a grid-stride loop")
    with pytest.raises(NotImplementedError, match="Exercise 10.1"):
        checks.check_sgd_gridstride(stub)


# --- the course's magnitudes (parameters at 0, gradients of 1e-7 to 1e-2, exact zeros) ------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("p[i] -= lr * g[i]", "if abs(g[i]) > 1e-4: p[i] -= lr * g[i]", id="small gradients skipped"),
    pytest.param("p[i] -= lr * g[i]", "if p[i] != 0: p[i] -= lr * g[i]", id="parameters at 0 skipped"),
])
def test_sgd_gridstride_check_uses_real_magnitudes(old, new):
    with pytest.raises(CheckFailure, match="Exercise 10.1"):
        checks.check_sgd_gridstride(mutant(sgd_gridstride_kernel, old, new))


def test_sgd_gridstride_skipping_zero_gradients_passes():
    """A zero gradient moves nothing: skipping it is right."""
    checks.check_sgd_gridstride(mutant(sgd_gridstride_kernel, "p[i] -= lr * g[i]", "if g[i] != 0: p[i] -= lr * g[i]"))
