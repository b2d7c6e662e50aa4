"""Notebook 04's checks pass the solutions and reject planted wrong kernels (forgotten / B among them)."""
import pytest
from numba import cuda, float32

from course.checks import CheckFailure
from course.checks import grad as checks
from course.grad import dhidden_kernel, dlogits_kernel, matmul_tn_kernel


def test_solutions_pass():
    checks.check_dlogits_kernel(dlogits_kernel)
    checks.check_matmul_tn_kernel(matmul_tn_kernel)
    checks.check_dhidden_kernel(dhidden_kernel)


def make_dlogits(divide=True, by_block=False, onehot_by_row=False, guard=True, skip_last=False):
    @cuda.jit
    def kernel(probs, y, dZ):
        j, r = cuda.grid(2)
        if not guard or (r < dZ.shape[0] - (1 if skip_last else 0) and j < dZ.shape[1]):
            target = y[r % y.shape[0]]
            hit = (r % dZ.shape[1] == target) if onehot_by_row else (j == target)
            g = probs[r, j] - (float32(1.0) if hit else float32(0.0))
            if divide:
                g /= float32(cuda.blockDim.y if by_block else probs.shape[0])
            dZ[r, j] = g
    return kernel


@pytest.mark.parametrize("mistake", [dict(divide=False), dict(by_block=True), dict(onehot_by_row=True),
                                     dict(guard=False), dict(skip_last=True)], ids=str)
def test_dlogits_check_rejects(mistake):
    with pytest.raises(CheckFailure, match="Exercise 4.1 failed"):
        checks.check_dlogits_kernel(make_dlogits(**mistake))


def make_tn(transpose=True, guard=True, axes_swapped=False, short_loop=False):
    @cuda.jit
    def kernel(A, B, C):
        if axes_swapped:
            i, j = cuda.grid(2)
        else:
            j, i = cuda.grid(2)
        if not guard or (i < C.shape[0] and j < C.shape[1]):
            acc = float32(0.0)
            for r in range(A.shape[0] - (1 if short_loop else 0)):
                a = A[r, i] if transpose else A[i % A.shape[0], r % A.shape[1]]
                acc += a * B[r, j]
            C[i, j] = acc
    return kernel


@pytest.mark.parametrize("mistake", [dict(transpose=False), dict(guard=False), dict(axes_swapped=True),
                                     dict(short_loop=True)], ids=str)
def test_matmul_tn_check_rejects(mistake):
    with pytest.raises(CheckFailure, match="Exercise 4.2 failed"):
        checks.check_matmul_tn_kernel(make_tn(**mistake))


def make_dhidden(mask="strict", transpose=True, write_masked=True):
    @cuda.jit
    def kernel(dZ, W, H, dH):
        i, r = cuda.grid(2)
        if r < dH.shape[0] and i < dH.shape[1]:
            acc = float32(0.0)
            for j in range(dZ.shape[1]):
                acc += dZ[r, j] * (W[i, j] if transpose else W[j % W.shape[0], i % W.shape[1]])
            if mask == "strict":
                on = H[r, i] > 0
            elif mask == "ge":
                on = H[r, i] >= 0
            elif mask == "dZ":
                on = dZ[r, i % dZ.shape[1]] > 0
            else:
                on = True
            if on:
                dH[r, i] = acc
            elif write_masked:
                dH[r, i] = float32(0.0)
    return kernel


@pytest.mark.parametrize("mistake", [dict(mask="ge"), dict(mask="none"), dict(mask="dZ"), dict(transpose=False),
                                     dict(write_masked=False)], ids=str)
def test_dhidden_check_rejects(mistake):
    with pytest.raises(CheckFailure, match="Exercise 4.3 failed"):
        checks.check_dhidden_kernel(make_dhidden(**mistake))
