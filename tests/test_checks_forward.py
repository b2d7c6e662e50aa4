"""Notebook 02's checks pass the solutions and reject planted wrong kernels (including missing barriers)."""
import pytest
from numba import cuda, float32

import course

from course.checks import CheckFailure
from course.checks import forward as checks
from course.forward import TILE, linear_kernel, matmul_v1_kernel, matmul_v2_kernel, tile_dot


def test_solutions_pass():
    checks.check_matmul_kernel(matmul_v1_kernel)
    checks.check_tiled_matmul(matmul_v2_kernel)
    checks.check_linear_kernel(linear_kernel)


# --- Exercise 2.1 ------------------------------------------------------------------------------------

@cuda.jit
def mm_rows_on_x(A, B, C):
    row, col = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@cuda.jit
def mm_no_guard(A, B, C):
    col, row = cuda.grid(2)
    acc = float32(0.0)
    for k in range(A.shape[1]):
        acc += A[row, k] * B[k, col]
    C[row, col] = acc


@cuda.jit
def mm_k_off_by_one(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1] - 1):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@cuda.jit
def mm_transposed_b(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[col % B.shape[0], k % B.shape[1]]
        C[row, col] = acc


@cuda.jit
def mm_accumulates_into_output(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        for k in range(A.shape[1]):
            C[row, col] += A[row, k] * B[k, col]  # C was never zeroed


@cuda.jit
def mm_skips_last_row(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] - 1 and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@pytest.mark.parametrize("kernel", [mm_rows_on_x, mm_no_guard, mm_k_off_by_one, mm_transposed_b,
                                    mm_accumulates_into_output, mm_skips_last_row])
def test_matmul_check_rejects(kernel):
    with pytest.raises(CheckFailure, match="Exercise 2.1 failed"):
        checks.check_matmul_kernel(kernel)


# --- Exercise 2.2: planted tile loaders ---------------------------------------------------------------

def make_tiled(load_guard=True, zero_pad=True, sync1=True, sync2=True, transposed=False):
    """A tiled matmul whose tile_dot has one planted mistake."""
    @cuda.jit(device=True)
    def bad_tile_dot(A, B, row, col, sA, sB):
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        acc = float32(0.0)
        for k0 in range(0, A.shape[1], TILE):
            if not load_guard:
                sA[ty, tx] = A[row, k0 + tx]
                sB[ty, tx] = B[k0 + ty, col]
            else:
                if row < A.shape[0] and k0 + tx < A.shape[1]:
                    if transposed:
                        sA[tx, ty] = A[row, k0 + tx]
                    else:
                        sA[ty, tx] = A[row, k0 + tx]
                elif zero_pad:
                    sA[ty, tx] = float32(0.0)
                if k0 + ty < B.shape[0] and col < B.shape[1]:
                    sB[ty, tx] = B[k0 + ty, col]
                elif zero_pad:
                    sB[ty, tx] = float32(0.0)
            if sync1:
                cuda.syncthreads()
            for k in range(TILE):
                acc += sA[ty, k] * sB[k, tx]
            if sync2:
                cuda.syncthreads()
        return acc

    @cuda.jit
    def kernel(A, B, C):
        sA = cuda.shared.array((TILE, TILE), float32)
        sB = cuda.shared.array((TILE, TILE), float32)
        col, row = cuda.grid(2)
        acc = bad_tile_dot(A, B, row, col, sA, sB)
        if row < C.shape[0] and col < C.shape[1]:
            C[row, col] = acc
    return kernel


@pytest.mark.parametrize("mistake", [dict(load_guard=False), dict(zero_pad=False), dict(sync1=False),
                                     dict(sync2=False), dict(transposed=True)], ids=str)
def test_tiled_check_rejects(mistake):
    if mistake == dict(sync2=False) and not course.SIMULATOR:
        # Measured on an H200: without the second barrier the results still came out right at these sizes (the
        # 8 warps of a block happen to stay in step). The simulator runs each thread up to a barrier, so the race
        # always bites there; on a GPU, compute-sanitizer --tool racecheck is the tool that finds it.
        pytest.skip("the missing second barrier is a race that a GPU does not reliably show")
    with pytest.raises(CheckFailure, match="Exercise 2.2 failed"):
        checks.check_tiled_matmul(make_tiled(**mistake))


@cuda.jit
def tiled_returns_early(A, B, C):
    """Threads outside C skip tile_dot: they never load their part of the tiles."""
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        C[row, col] = tile_dot(A, B, row, col, sA, sB)


def test_tiled_check_rejects_early_return():
    # On a GPU, a barrier that not every thread reaches is undefined behaviour (often a hang or stale tiles);
    # in the simulator the skipping threads never store their share of the tiles, so results come out wrong.
    with pytest.raises(CheckFailure, match="Exercise 2.2 failed"):
        checks.check_tiled_matmul(tiled_returns_early)


# --- Exercise 2.3 ------------------------------------------------------------------------------------

def make_linear(bias_by_row=False, relu_always=False, relu_first=False, guard=True):
    @cuda.jit
    def kernel(X, W, b, relu, Y):
        sA = cuda.shared.array((TILE, TILE), float32)
        sB = cuda.shared.array((TILE, TILE), float32)
        col, row = cuda.grid(2)
        acc = tile_dot(X, W, row, col, sA, sB)
        if not guard or (row < Y.shape[0] and col < Y.shape[1]):
            if relu_first and relu and acc < 0:
                acc = float32(0.0)
            acc += b[row % b.shape[0]] if bias_by_row else b[col % b.shape[0]]
            if not relu_first and (relu or relu_always) and acc < 0:
                acc = float32(0.0)
            Y[row, col] = acc
    return kernel


@pytest.mark.parametrize("mistake", [dict(bias_by_row=True), dict(relu_always=True), dict(relu_first=True),
                                     dict(guard=False)], ids=str)
def test_linear_check_rejects(mistake):
    with pytest.raises(CheckFailure, match="Exercise 2.3 failed"):
        checks.check_linear_kernel(make_linear(**mistake))
