"""Notebook 11's third check (exercise 11.3, how many inputs a tile of W1 holds) passes the solution and another
correct answer, rejects planted one-line bugs with a message naming each, and stands on the course's real figures."""
import json
from pathlib import Path

import pytest
from conftest import mutant

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import plan as checks
from course.fused import CH, CHUNK, REGS, SMEM_STATIC, THREADS, TJ, TK, X_CELLS, block_smem, tile_inputs

RESULTS = Path(__file__).resolve().parent.parent / "notebooks" / "results"


def test_solution_passes():
    checks.check_tile_inputs(tile_inputs)


def test_tile_inputs_written_another_way_passes():
    """Another correct answer: try every height in chunks of CH, shortest first, until every tile has a block."""
    def tile_inputs_by_search(sms, inputs, hidden, batch):
        """The first height in whole chunks whose tiles number at most sms, if its block fits shared memory."""
        across = -(-hidden // TJ)
        for tk in range(CH, inputs + CH, CH):
            if -(-inputs // tk) * across <= sms:
                return tk if block_smem(tk, batch) <= SMEM_STATIC else None
        return None
    checks.check_tile_inputs(tile_inputs_by_search)


@pytest.mark.parametrize("old,new,said", [
    ("((hidden + TJ - 1) // TJ)", "(hidden // TJ)", "not a multiple of TJ: the last column is narrower"),
    ("rows = sms // ((hidden + TJ - 1) // TJ)", "rows = -(-sms // ((hidden + TJ - 1) // TJ))",
     "some block would own two"),                                                            # more rows than blocks
    ("tk = (inputs + rows - 1) // rows", "tk = inputs // rows", "some block would own two"),   # rounded down
    ("tk = (tk + CH - 1) // CH * CH", "tk = tk", "not a positive multiple of CH"),
    ("return tk if block_smem(tk, batch) <= SMEM_STATIC else None", "return tk", "over SMEM_STATIC"),
    ("<= SMEM_STATIC", "< SMEM_STATIC", "that many included"),
    ("block_smem(tk, batch)", "block_smem(tk, 1)", "batches of 64 rows"),
    ("rows = sms // (", "rows = 1 + 0 * (", "is that the one your function tried"),          # the tallest tile
    ("tk = (tk + CH - 1) // CH * CH", "tk = (tk + CH) // CH * CH", "are shorter and also keep"),  # a chunk too many
    ("return None                                    #", "return 0  #", "expected None, got 0"),
    ("    if rows == 0:\n        return None", "    pass", "ZeroDivisionError"),
    ("return tk if", "return float(tk) if", "expected a Python int or None"),
])
def test_tile_inputs_check_rejects(old, new, said):
    with pytest.raises(CheckFailure, match="Exercise 11.3") as e:
        checks.check_tile_inputs(mutant(tile_inputs, old, new))
    assert said in str(e.value), str(e.value)


def test_the_cases_stand_on_the_course_and_bind_each_limit():
    """The H200's answer is the kernel's TK; the T4's grid (fused-t4grid-h200.json) keeps no tile, as that run says;
    block_smem is what ptxas gave the kernel; 11.4's reference puts one such block on an SM; every kind occurs."""
    import numpy as np
    from course.checks.occupancy import blocks_per_sm_ref, limits_ref
    t4 = json.loads((RESULTS / "fused-t4grid-h200.json").read_text(encoding="utf-8"))
    assert checks.T4_SMS == t4["grid"] == t4["t4_limits"]["sms"] and t4["w1_tiles_kept"] is False
    from course.tools import nbtools
    info, = [c for c in nbtools.read(nbtools.NOTEBOOKS / "11_fused.ipynb")["cells"] if c.get("id") == "g001"]
    assert f"(compute capability 9.0, {checks.H200_SMS} SMs" in "".join(info["outputs"][0]["text"])   # an H100 or H200
    assert checks.tile_inputs_ref(checks.H200_SMS, 784, 128, CHUNK) == TK
    assert checks.tile_inputs_ref(checks.T4_SMS, 784, 128, CHUNK) is None
    assert block_smem(TK, CHUNK) == t4["sm75_resources"]["shared"]         # ptxas's bytes, alignment included
    assert block_smem(TK, CHUNK) >= 4 * X_CELLS
    assert blocks_per_sm_ref(THREADS, REGS, block_smem(TK, CHUNK)) == limits_ref(THREADS, REGS, 0)["registers"] == 1
    cases = checks._cases(np.random.default_rng(0))
    kinds = {checks._kind(*c[:4]) for c in cases}
    assert kinds == set(checks.KINDS), kinds
    exact = [c for c in cases if block_smem(checks.tile_inputs_ref(*c[:4]) or CH, c[3]) == SMEM_STATIC]
    assert exact, "a case at exactly SMEM_STATIC"
