"""Notebook 02's checks pass the solutions and reject planted wrong kernels (including missing barriers)."""
import pytest
from conftest import mutant, mutated, rejects

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)

from course.checks import CheckFailure
from course.checks import forward as checks
from course.forward import linear_kernel, matmul_v1_kernel, matmul_v2_kernel, tile_dot


def test_solutions_pass():
    checks.check_matmul_kernel(matmul_v1_kernel)
    checks.check_tiled_matmul(matmul_v2_kernel)
    checks.check_linear_kernel(linear_kernel)


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----
# A row's edits are (old, new) replacements applied in turn to the solution's source.

def bug(id, *edits):
    return pytest.param(edits, id=id)


# --- Exercise 2.1 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("edits", [
    bug("rows on x", ("col, row = cuda.grid(2)", "row, col = cuda.grid(2)")),
    bug("no bounds guard", ("if row < C.shape[0] and col < C.shape[1]:", "if True:")),
    bug("k off by one", ("range(A.shape[1])", "range(A.shape[1] - 1)")),
    bug("transposed B", ("* B[k, col]  #", "* B[col % B.shape[0], k % B.shape[1]]  #")),
    bug("accumulates into C", ("acc += A[row, k]", "C[row, col] += A[row, k]"),  # C was never zeroed
        ("C[row, col] = acc", "pass")),
    bug("skips the last row", ("row < C.shape[0]", "row < C.shape[0] - 1")),
])
def test_matmul_check_rejects(edits):
    with pytest.raises(CheckFailure, match="Exercise 2.1 failed"):
        checks.check_matmul_kernel(mutated(matmul_v1_kernel, *edits))


# --- Exercise 2.2: planted tile loaders ---------------------------------------------------------------

def tiled_with(*edits):
    """matmul_v2_kernel calling a tile_dot with the edits planted in it."""
    return mutant(matmul_v2_kernel, "tile_dot(", "bad_tile_dot(", scope={"bad_tile_dot": mutated(tile_dot, *edits)})


NO_SYNC2 = ("cuda.syncthreads()  # 2", "pass  # 2")


@pytest.mark.parametrize("edits", [
    bug("loads unguarded", ("if row < A.shape[0] and k0 + tx < A.shape[1]:", "if True:"),
        ("if k0 + ty < B.shape[0] and col < B.shape[1]:", "if True:")),
    bug("no zero padding", ("sA[ty, tx] = float32(0.0)", "pass"), ("sB[ty, tx] = float32(0.0)", "pass")),
    bug("missing syncthreads after the load", ("cuda.syncthreads()  # 1", "pass  # 1")),
    bug("missing syncthreads after the dot", NO_SYNC2),
    bug("transposed A tile", ("sA[ty, tx] = A[row, k0 + tx]", "sA[tx, ty] = A[row, k0 + tx]")),
])
def test_tiled_check_rejects(edits):
    # On an H200 the missing second barrier alone gave right results at these sizes (the 8 warps of a block
    # happened to stay in step); the check's run of its smallest odd case in the simulator (on a GPU too:
    # core.simulator_eyes) runs each thread up to a barrier, where the race always bites.
    with pytest.raises(CheckFailure, match="Exercise 2.2 failed"):
        checks.check_tiled_matmul(tiled_with(*edits))


def test_tiled_check_rejects_early_return():
    # On a GPU, a barrier that not every thread reaches is undefined behaviour (often a hang or stale tiles);
    # in the simulator the skipping threads never store their share of the tiles, so results come out wrong.
    # Threads outside C skip tile_dot: they never load their part of the tiles.
    returns_early = mutated(matmul_v2_kernel, ("acc = tile_dot(A, B, row, col, sA, sB)", "pass"),
                            ("C[row, col] = acc", "C[row, col] = tile_dot(A, B, row, col, sA, sB)"))
    with pytest.raises(CheckFailure, match="Exercise 2.2 failed"):
        checks.check_tiled_matmul(returns_early)


# --- Exercise 2.3 ------------------------------------------------------------------------------------

RELU = "if relu and acc < float32(0.0):"


@pytest.mark.parametrize("edits", [
    bug("bias by row", ("b[col]", "b[row % b.shape[0]]")),
    bug("ReLU always", (RELU, "if acc < float32(0.0):")),
    bug("ReLU before the bias", (RELU, "if False:"),
        ("acc += b[col]", RELU + "\n            acc = float32(0.0)\n        acc += b[col]")),
    bug("no bounds guard", ("if row < Y.shape[0] and col < Y.shape[1]:", "if True:")),
])
def test_linear_check_rejects(edits):
    with pytest.raises(CheckFailure, match="Exercise 2.3 failed"):
        checks.check_linear_kernel(mutated(linear_kernel, *edits))


# --- answers that fit only the notebook's inputs (sizes, values), planted before the check changed ---
# Classes: a row guard hard-coded to the notebook's batch (64), a sum over at most 64 terms (the notebook's K is
# 784), an output written only where the sum is non-zero (random inputs never sum to exactly 0), a ReLU applied
# only when the flag equals 1 (the spec: any non-zero value).

NONZERO_ONLY = "if acc != 0:\n            {0} = acc"


@pytest.mark.parametrize("check, solution, edits, says", [
    pytest.param(checks.check_matmul_kernel, matmul_v1_kernel, [("row < C.shape[0]", "row < min(C.shape[0], 64)")],
                 ["never written"], id="2.1 row guard of 64"),
    pytest.param(checks.check_matmul_kernel, matmul_v1_kernel, [("range(A.shape[1])", "range(min(A.shape[1], 64))")],
                 ["expected"], id="2.1 sum over at most 64"),
    pytest.param(checks.check_matmul_kernel, matmul_v1_kernel,
                 [("C[row, col] = acc", NONZERO_ONLY.format("C[row, col]"))], ["never written"],
                 id="2.1 written only where non-zero"),
    pytest.param(checks.check_tiled_matmul, "tile_dot",
                 [("if row < A.shape[0] and", "if row < min(A.shape[0], 64) and")], ["expected"],
                 id="2.2 row guard of 64"),
    pytest.param(checks.check_tiled_matmul, "tile_dot",
                 [("range(0, A.shape[1], TILE)", "range(0, min(A.shape[1], 64), TILE)")], ["expected"],
                 id="2.2 sum over at most 64"),
    pytest.param(checks.check_tiled_matmul, matmul_v2_kernel,
                 [("C[row, col] = acc", NONZERO_ONLY.format("C[row, col]"))], ["never written"],
                 id="2.2 written only where non-zero"),
    pytest.param(checks.check_linear_kernel, linear_kernel, [("if relu and", "if relu == 1 and")], ["expected"],
                 id="2.3 ReLU only when relu == 1"),
    pytest.param(checks.check_linear_kernel, linear_kernel, [("Y[row, col] = acc", NONZERO_ONLY.format("Y[row, col]"))],
                 ["never written"], id="2.3 written only where non-zero"),
    pytest.param(checks.check_linear_kernel, linear_kernel, [("row < Y.shape[0]", "row < min(Y.shape[0], 64)")],
                 ["never written"], id="2.3 row guard of 64"),
])
def test_answers_for_the_notebooks_inputs_only_rejected(check, solution, edits, says):
    wrong = tiled_with(*edits) if solution == "tile_dot" else mutated(solution, *edits)
    rejects(check, wrong, f"Exercise {check.exercise}", says)
