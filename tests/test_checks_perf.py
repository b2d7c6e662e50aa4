"""Notebooks 10 and 15 (the appendix): their checks pass the solutions and reject planted wrong kernels."""
import json
import re

import pytest
from conftest import mutant, rejects
from numba import cuda

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import perf as checks
from course.matmul import matmul_v3_kernel, tile_product
from course.merged import sgd_gridstride_kernel
from course.tools import nbtools


def test_solutions_pass():
    checks.check_matmul_v3(matmul_v3_kernel)
    checks.check_sgd_gridstride(sgd_gridstride_kernel)


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----

# --- Exercise 15.1: planted wrong tile_product (the kernel around it as in the solution) ----------------------

def v3_calling(old, new):
    """matmul_v3_kernel calling a copy of the solution's tile_product with `old` replaced by `new`."""
    wrong = mutant(tile_product, old, new)
    return mutant(matmul_v3_kernel, "tile_product(", "wrong_tile_product(", scope={"wrong_tile_product": wrong})


@pytest.mark.parametrize("old, new", [
    pytest.param("a[i] * b[j]", "a[i] * b[i]", id="b[i] for b[j]"),  # a plausible typo
    # a thread's rows taken as ty*TM + i: not the rows the epilogue writes
    pytest.param("sA[kk, ty + TY * i]", "sA[kk, ty * TM + i]", id="contiguous rows"),
    pytest.param("sB[kk, tx + TX * j]", "sB[kk, tx * TN + j]", id="contiguous columns"),
    pytest.param("sB[kk, tx + TX * j]", "sB[kk, ty + TY * j]", id="ty for tx in B's columns"),
    # the last k of each tile is skipped
    pytest.param("for kk in range(BK):", "for kk in range(BK - 1):", id="short k (BK - 1)"),
    # = for +=: only the tile's last k survives
    pytest.param("acc[i, j] += a[i] * b[j]", "acc[i, j] = a[i] * b[j]", id="= for +="),
    # only the diagonal of the outer product
    pytest.param("for j in range(TN):\n                acc[i, j]", "for j in range(i, i + 1):\n                acc[i, j]",
                 id="diagonal only"),
])
def test_matmul_v3_check_rejects_a_wrong_tile_product(old, new):
    msg = rejects(checks.check_matmul_v3, v3_calling(old, new), "Exercise 15.1", ["expected", "should be"])
    assert "strided" in msg and "outer product" in msg, msg   # the hint names what to look at


def test_matmul_v3_check_rejects_a_kernel_without_its_epilogue_guard():
    with pytest.raises(CheckFailure, match="Exercise 15.1"):   # writes every acc, also outside C
        checks.check_matmul_v3(mutant(matmul_v3_kernel, "if row < C.shape[0] and col < C.shape[1]:", "if True:"))


def test_the_answer_of_15_1_is_printed_in_no_other_cell_of_the_student_copy():
    """v4 calls tile_product on its current buffer: no cell of notebook 15's student copy holds the loads that are
    the answer (A's tile read at the strided rows ty + TY*i, B's at tx + TX*j), as v4's collapsed code did (issue 51)."""
    nb = json.loads((nbtools.EXERCISES / "15_matmul.ipynb").read_text())
    code = "\n".join(nbtools.source(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert "def tile_product(" in code and "tile_product(sA[s], sB[s]" in code
    assert not re.search(r"s[AB]\[[^\]]*t[xy] \+ T[XY] \* [ij]\]", code), re.findall(r"s[AB]\[[^\]]*\]", code)


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
