"""Checks for notebook 02's exercises: the naive matmul, the tiled matmul's loading phase, the fused epilogue."""
import numpy as np

import course
from course.checks.core import run_cases
from course.util import cdiv

_M2 = "float32[:, ::1]"
_A2 = "float32[:, :]"
SIGNATURES = {  # for tests/test_compile.py: every kernel of notebook 02, as launchers and checks call it
    "course.forward:matmul_v1_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.forward:matmul_v2_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.forward:linear_kernel": [f"{_M2}, {_M2}, float32[::1], int64, {_M2}",
                                     f"{_A2}, {_A2}, float32[:], int64, {_A2}"],
}
ATOL = RTOL = 1e-4  # float32 sums of <= 100 products of N(0, 1) numbers, accumulated in another order than BLAS


def _matrices(rng, M, K, N):
    return (rng.standard_normal((M, K)).astype(np.float32),   # (M, K)
            rng.standard_normal((K, N)).astype(np.float32))   # (K, N)


def _cases(rng, shapes_blocks, extra_blocks=(0, 0)):
    cases = []
    for (M, K, N), block in shapes_blocks:
        A, B = _matrices(rng, M, K, N)
        grid = (cdiv(N, block[0]) + extra_blocks[0], cdiv(M, block[1]) + extra_blocks[1])
        cases.append(dict(name=f"A {A.shape} @ B {B.shape}", grid=grid, block=block, inputs=[A, B],
                          expected=A @ B))
    return cases


def check_matmul_kernel(kernel, seed=0):
    """Exercise 2.1: C = A @ B, one thread per element, x over columns; odd shapes, three block shapes."""
    rng = np.random.default_rng(seed)
    cases = _cases(rng, [((19, 37, 23), (16, 16)), ((9, 50, 33), (32, 4)), ((course.pick(70, 6), 8, 5), (8, 8))])
    cases += _cases(rng, [((13, 11, 21), (8, 8))], extra_blocks=(1, 2))  # spare blocks must do nothing
    run_cases("Exercise 2.1", kernel, cases, atol=ATOL, rtol=RTOL,
              hint="col, row = cuda.grid(2) (x walks the columns of C); guard row < C.shape[0] and "
                   "col < C.shape[1]; acc = float32(0.0); acc += A[row, k] * B[k, col] for k in range(A.shape[1])")


def check_tiled_matmul(kernel, seed=0):
    """Exercise 2.2: the tiled matmul (its tile loading) on odd shapes, with exact and oversized grids."""
    rng = np.random.default_rng(seed)
    cases = _cases(rng, [((19, 37, 23), (16, 16)), ((1, 40, 5), (16, 16))])
    cases += _cases(rng, [((course.pick(33, 17), 21, 17), (16, 16))], extra_blocks=(1, 1))
    run_cases("Exercise 2.2", kernel, cases, atol=ATOL, rtol=RTOL,
              hint="each thread loads ONE element of each tile: sA[ty, tx] = A[row, k0 + tx] and "
                   "sB[ty, tx] = B[k0 + ty, col], or float32(0.0) when that index is outside A or B; "
                   "never skip the loads or return early (the barriers need every thread)")


def check_linear_kernel(kernel, seed=0):
    """Exercise 2.3: Y = X @ W + b (+ ReLU when relu != 0) on odd shapes, with and without ReLU."""
    rng = np.random.default_rng(seed)
    cases = []
    for (M, K, N), relu, extra in (((19, 37, 23), 1, (0, 0)), ((18, 21, 35), 0, (0, 0)),
                                   ((5, 30, 17), 1, (1, 1)), ((7, 9, 3), 0, (1, 0))):
        X, W = _matrices(rng, M, K, N)
        b = rng.standard_normal(N).astype(np.float32)  # (N,), both signs so the ReLU has work to do
        Y = X @ W + b
        grid = (cdiv(N, 16) + extra[0], cdiv(M, 16) + extra[1])
        cases.append(dict(name=f"X {X.shape} @ W {W.shape} + b, relu={relu}", grid=grid, block=(16, 16),
                          inputs=[X, W, b, relu], expected=np.maximum(Y, 0) if relu else Y))
    run_cases("Exercise 2.3", kernel, cases, atol=ATOL, rtol=RTOL,
              hint="only threads inside Y write; the bias is per output feature: acc += b[col]; then, only if "
                   "relu is non-zero, clamp negatives to 0; add the bias BEFORE the ReLU")
