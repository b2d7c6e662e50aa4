"""Notebook 04's checks pass the solutions and reject planted wrong kernels (forgotten / B among them)."""
import pytest
from conftest import mutant

from course.checks import CheckFailure
from course.checks import grad as checks
from course.grad import dhidden_kernel, dlogits_kernel, matmul_tn_kernel


def test_solutions_pass():
    checks.check_dlogits_kernel(dlogits_kernel)
    checks.check_matmul_tn_kernel(matmul_tn_kernel)
    checks.check_dhidden_kernel(dhidden_kernel)


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----

@pytest.mark.parametrize("old, new", [
    pytest.param(" / float32(probs.shape[0])", "", id="forgot / batch_size"),
    pytest.param("float32(probs.shape[0])", "float32(cuda.blockDim.y)", id="/ block size, not batch size"),
    pytest.param("if j == y[r]", "if r % dZ.shape[1] == y[r]", id="one-hot by row"),
    pytest.param("if r < dZ.shape[0] and j < dZ.shape[1]:", "if True:", id="no bounds guard"),
    pytest.param("r < dZ.shape[0]", "r < dZ.shape[0] - 1", id="skips the last row"),
])
def test_dlogits_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 4.1 failed"):
        checks.check_dlogits_kernel(mutant(dlogits_kernel, old, new))


@pytest.mark.parametrize("old, new", [
    pytest.param("A[r, i]", "A[i % A.shape[0], r % A.shape[1]]", id="A not transposed"),
    pytest.param("if i < C.shape[0] and j < C.shape[1]:", "if True:", id="no bounds guard"),
    pytest.param("j, i = cuda.grid(2)", "i, j = cuda.grid(2)", id="axes swapped"),
    pytest.param("range(A.shape[0])", "range(A.shape[0] - 1)", id="off by one in the sum"),
])
def test_matmul_tn_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 4.2 failed"):
        checks.check_matmul_tn_kernel(mutant(matmul_tn_kernel, old, new))


ON = "H[r, i] > float32(0.0)"


@pytest.mark.parametrize("old, new", [
    pytest.param(ON, "H[r, i] >= float32(0.0)", id="mask H >= 0"),
    pytest.param(f"if {ON}:", "if True:", id="no ReLU mask"),
    pytest.param("H[r, i] >", "dZ[r, i % dZ.shape[1]] >", id="mask from dZ"),
    pytest.param("W[i, j]", "W[j % W.shape[0], i % W.shape[1]]", id="W not transposed"),
    # masked elements are left unwritten instead of 0
    pytest.param("dH[r, i] = acc", f"if {ON}:\n            dH[r, i] = acc", id="masked left unwritten"),
])
def test_dhidden_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 4.3 failed"):
        checks.check_dhidden_kernel(mutant(dhidden_kernel, old, new))


# --- answers that fit only the notebook's inputs (sizes, values), planted before the check changed ---
# Classes: a row guard hard-coded to the notebook's batch (64), a sum over at most 64 rows, an output written only
# where it is non-zero (random probabilities are never exactly 0 or 1, random products never sum to exactly 0).

@pytest.mark.parametrize("check, solution, old, new", [
    pytest.param(checks.check_dlogits_kernel, dlogits_kernel, "r < dZ.shape[0]", "r < min(dZ.shape[0], 64)",
                 id="4.1 row guard of 64"),
    pytest.param(checks.check_dlogits_kernel, dlogits_kernel, "dZ[r, j] = (",
                 "if probs[r, j] != onehot:\n            dZ[r, j] = (", id="4.1 written only where non-zero"),
    pytest.param(checks.check_matmul_tn_kernel, matmul_tn_kernel, "range(A.shape[0])", "range(min(A.shape[0], 64))",
                 id="4.2 sum over at most 64 rows"),
    pytest.param(checks.check_matmul_tn_kernel, matmul_tn_kernel, "i < C.shape[0]", "i < min(C.shape[0], 64)",
                 id="4.2 row guard of 64"),
    pytest.param(checks.check_matmul_tn_kernel, matmul_tn_kernel, "C[i, j] = acc",
                 "if acc != 0:\n            C[i, j] = acc", id="4.2 written only where non-zero"),
    pytest.param(checks.check_dhidden_kernel, dhidden_kernel, "r < dH.shape[0]", "r < min(dH.shape[0], 64)",
                 id="4.3 row guard of 64"),
    pytest.param(checks.check_dhidden_kernel, dhidden_kernel, "dH[r, i] = acc",
                 "if acc != 0 or not H[r, i] > float32(0.0):\n            dH[r, i] = acc",
                 id="4.3 written only where the sum is non-zero"),
])
def test_answers_for_the_notebooks_inputs_only_rejected(check, solution, old, new):
    with pytest.raises(CheckFailure, match=f"Exercise {check.exercise} failed"):
        check(mutant(solution, old, new))
