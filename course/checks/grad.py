"""Checks for notebook 04's exercises: dZ2, the transposed product dW = A^T dZ, the ReLU mask."""
import numpy as np

import course
from course.checks.core import run_cases
from course.util import cdiv

_M2, _A2 = "float32[:, ::1]", "float32[:, :]"
SIGNATURES = {  # for tests/test_compile.py: every kernel of notebook 04, as launchers and checks call it
    "course.grad:dlogits_kernel": [f"{_M2}, int64[::1], {_M2}", f"{_M2}, int32[::1], {_M2}",
                                   f"{_A2}, int64[:], {_A2}"],
    "course.grad:matmul_tn_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.grad:colsum_kernel": [f"{_M2}, float32[::1]", f"{_A2}, float32[:]"],
    "course.grad:dhidden_kernel": [f"{_M2}, {_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}, {_A2}"],
}
TOL = 1e-5  # float32: dZ2 is one subtraction and one division; the products sum <= 60 terms of size ~1


def _probs(rng, B, C):
    z = rng.standard_normal((B, C)) * 3
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32)  # (B, C), rows sum to 1


def check_dlogits_kernel(kernel, seed=0):
    """Exercise 4.1: dZ = (probs - onehot(y)) / B on odd batch sizes, C = 10 and C = 7, two block shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for (B, C), block in (((course.pick(37, 13), 10), (16, 16)), ((21, 7), (8, 4)), ((3, 10), (32, 2))):
        probs = _probs(rng, B, C)
        y = rng.integers(0, C, B)
        expected = ((probs - np.eye(C, dtype=np.float32)[y]) / np.float32(B)).astype(np.float32)
        cases.append(dict(name=f"probs {probs.shape}", grid=(cdiv(C, block[0]), cdiv(B, block[1])), block=block,
                          inputs=[probs, y], expected=expected))
    run_cases("Exercise 4.1", kernel, cases, atol=TOL, rtol=TOL,
              hint="j, r = cuda.grid(2); guard r < dZ.shape[0] and j < dZ.shape[1]; subtract 1 only where "
                   "j == y[r]; divide by the batch size probs.shape[0] (the loss is a mean)")


def check_matmul_tn_kernel(kernel, seed=0):
    """Exercise 4.2: C = A^T @ B for A (R, M), B (R, N) on odd shapes, three block shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for (R, M, N), block in (((23, 19, 10), (16, 16)), ((course.pick(45, 9), 33, 17), (32, 4)),
                             ((5, 7, 40), (8, 8))):
        A = rng.standard_normal((R, M)).astype(np.float32)  # (R, M): e.g. H, with R = batch rows
        B = rng.standard_normal((R, N)).astype(np.float32)  # (R, N): e.g. dZ2
        cases.append(dict(name=f"A {A.shape}, B {B.shape}", grid=(cdiv(N, block[0]), cdiv(M, block[1])),
                          block=block, inputs=[A, B], expected=A.T @ B))
    run_cases("Exercise 4.2", kernel, cases, atol=1e-4, rtol=1e-4,
              hint="j, i = cuda.grid(2); C[i, j] = sum over the R rows r of A[r, i] * B[r, j] "
                   "(A is read down a column: that is the transpose); guard i < C.shape[0], j < C.shape[1]")


def check_dhidden_kernel(kernel, seed=0):
    """Exercise 4.3: dH = (dZ @ W^T) * [H > 0], where H has many exact zeros, on odd shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for (B, n_in, n_out), block in (((19, 23, 10), (16, 16)), ((course.pick(40, 7), 37, 7), (32, 4)),
                                    ((4, 9, 13), (8, 8))):
        dZ = rng.standard_normal((B, n_out)).astype(np.float32)           # (B, n_out)
        W = rng.standard_normal((n_in, n_out)).astype(np.float32)         # (n_in, n_out)
        H = np.maximum(rng.standard_normal((B, n_in)), 0).astype(np.float32)  # (B, n_in), ~half exact zeros
        expected = ((dZ @ W.T) * (H > 0)).astype(np.float32)
        cases.append(dict(name=f"dZ {dZ.shape}, W {W.shape}, H {H.shape}",
                          grid=(cdiv(n_in, block[0]), cdiv(B, block[1])), block=block,
                          inputs=[dZ, W, H], expected=expected))
    run_cases("Exercise 4.3", kernel, cases, atol=1e-4, rtol=1e-4,
              hint="i, r = cuda.grid(2); the sum is over the n_out columns: dZ[r, j] * W[i, j]; write it only "
                   "where H[r, i] > 0 (strictly: ReLU's zeros pass no gradient) and write 0 elsewhere")
