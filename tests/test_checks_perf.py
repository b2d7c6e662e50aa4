"""Notebook 08's checks pass the solutions and reject planted wrong kernels."""
import pytest
from numba import cuda, float32

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import perf as checks
from course.perf import BK, BM, BMP, BN, TM, TN, TX, TY, load_tiles, matmul_v3_kernel, sgd_gridstride_kernel


def test_solutions_pass():
    checks.check_matmul_v3(matmul_v3_kernel)
    checks.check_sgd_gridstride(sgd_gridstride_kernel)


# --- Exercise 8.1: planted wrong inner products (the rest of the kernel as in the solution) -----------------

@cuda.jit
def v3_wrong_register(A, B, C):  # b[i] for b[j]: a plausible typo
    sA = cuda.shared.array((BK, BMP), float32)
    sB = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bm = cuda.blockIdx.y * BM
    bn = cuda.blockIdx.x * BN
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, A.shape[1], BK):
        load_tiles(A, B, sA, sB, bm, bn, k0)
        cuda.syncthreads()
        for kk in range(BK):
            for i in range(TM):
                a[i] = sA[kk, ty + TY * i]
            for j in range(TN):
                b[j] = sB[kk, tx + TX * j]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[i]
        cuda.syncthreads()
    for i in range(TM):
        row = bm + ty + TY * i
        for j in range(TN):
            col = bn + tx + TX * j
            if row < C.shape[0] and col < C.shape[1]:
                C[row, col] = acc[i, j]


@cuda.jit
def v3_contiguous_rows(A, B, C):  # a thread's rows taken as ty*TM + i: not the rows the epilogue writes
    sA = cuda.shared.array((BK, BMP), float32)
    sB = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bm = cuda.blockIdx.y * BM
    bn = cuda.blockIdx.x * BN
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, A.shape[1], BK):
        load_tiles(A, B, sA, sB, bm, bn, k0)
        cuda.syncthreads()
        for kk in range(BK):
            for i in range(TM):
                a[i] = sA[kk, ty * TM + i]
            for j in range(TN):
                b[j] = sB[kk, tx + TX * j]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()
    for i in range(TM):
        row = bm + ty + TY * i
        for j in range(TN):
            col = bn + tx + TX * j
            if row < C.shape[0] and col < C.shape[1]:
                C[row, col] = acc[i, j]


@cuda.jit
def v3_short_k(A, B, C):  # range(BK - 1): the last column of each tile is skipped
    sA = cuda.shared.array((BK, BMP), float32)
    sB = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bm = cuda.blockIdx.y * BM
    bn = cuda.blockIdx.x * BN
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, A.shape[1], BK):
        load_tiles(A, B, sA, sB, bm, bn, k0)
        cuda.syncthreads()
        for kk in range(BK - 1):
            for i in range(TM):
                a[i] = sA[kk, ty + TY * i]
            for j in range(TN):
                b[j] = sB[kk, tx + TX * j]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()
    for i in range(TM):
        row = bm + ty + TY * i
        for j in range(TN):
            col = bn + tx + TX * j
            if row < C.shape[0] and col < C.shape[1]:
                C[row, col] = acc[i, j]


@cuda.jit
def v3_no_epilogue_guard(A, B, C):  # writes every acc, also outside C
    sA = cuda.shared.array((BK, BMP), float32)
    sB = cuda.shared.array((BK, BN), float32)
    acc = cuda.local.array((TM, TN), float32)
    a = cuda.local.array(TM, float32)
    b = cuda.local.array(TN, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bm = cuda.blockIdx.y * BM
    bn = cuda.blockIdx.x * BN
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, A.shape[1], BK):
        load_tiles(A, B, sA, sB, bm, bn, k0)
        cuda.syncthreads()
        for kk in range(BK):
            for i in range(TM):
                a[i] = sA[kk, ty + TY * i]
            for j in range(TN):
                b[j] = sB[kk, tx + TX * j]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()
    for i in range(TM):
        for j in range(TN):
            C[bm + ty + TY * i, bn + tx + TX * j] = acc[i, j]


@pytest.mark.parametrize("kernel", [v3_wrong_register, v3_contiguous_rows, v3_short_k, v3_no_epilogue_guard],
                         ids=lambda k: k.py_func.__name__)
def test_matmul_v3_check_rejects(kernel):
    with pytest.raises(CheckFailure, match="Exercise 8.1"):
        checks.check_matmul_v3(kernel)


# --- Exercise 8.2: planted wrong grid-stride loops -----------------------------------------------------------

@cuda.jit
def sgd_no_loop(p, g, lr):  # one element per thread: a grid too small leaves elements untouched
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= lr * g[i]


@cuda.jit
def sgd_block_stride(p, g, lr):  # strides by the block, not the grid: elements updated by several blocks
    for i in range(cuda.grid(1), p.size, cuda.blockDim.x):
        p[i] -= lr * g[i]


@cuda.jit
def sgd_local_start(p, g, lr):  # starts at threadIdx.x: every block repeats block 0's elements
    for i in range(cuda.threadIdx.x, p.size, cuda.gridsize(1)):
        p[i] -= lr * g[i]


@cuda.jit
def sgd_off_by_one(p, g, lr):  # stops one short
    for i in range(cuda.grid(1), p.size - 1, cuda.gridsize(1)):
        p[i] -= lr * g[i]


@cuda.jit
def sgd_past_the_end(p, g, lr):  # <= instead of <: writes one element past the end
    i = cuda.grid(1)
    while i <= p.size:
        if i < p.size + 1:
            p[i] -= lr * g[i]
        i += cuda.gridsize(1)


@pytest.mark.parametrize("kernel", [sgd_no_loop, sgd_block_stride, sgd_local_start, sgd_off_by_one,
                                    sgd_past_the_end], ids=lambda k: k.py_func.__name__)
def test_sgd_gridstride_check_rejects(kernel):
    with pytest.raises(CheckFailure, match="Exercise 8.2"):
        checks.check_sgd_gridstride(kernel)


def test_unimplemented_raises_not_implemented():
    @cuda.jit
    def stub(p, g, lr):
        raise NotImplementedError("Exercise 8.2: a grid-stride loop")
    with pytest.raises(NotImplementedError, match="Exercise 8.2"):
        checks.check_sgd_gridstride(stub)
