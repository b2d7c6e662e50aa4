"""Exercise 11.4's occupancy check (notebook 11) passes the solution and rejects planted wrong answers."""
import re

import pytest
from conftest import mutant

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import occupancy as checks
from course.fused import blocks_per_sm


def test_solution_passes():
    checks.check_blocks_per_sm(blocks_per_sm)


def test_a_different_correct_answer_passes():
    def blocks_per_sm_loop(threads, regs, smem):
        """Add blocks one at a time until the next one does not fit."""
        import math
        warps = math.ceil(threads / 32)
        warp_regs = math.ceil(regs * 32 / 256) * 256
        n = 0
        while (n + 1 <= 32 and (n + 1) * warps <= 64 and (n + 1) * warps * warp_regs <= 65536
               and (n + 1) * (smem + 1024) <= 233472):
            n += 1
        return n
    checks.check_blocks_per_sm(blocks_per_sm_loop)


@pytest.mark.parametrize("old, new", [
    pytest.param("(threads + 31) // 32", "threads // 32 or 1", id="partial warp not counted"),
    pytest.param("(regs * 32 + REG_UNIT - 1) // REG_UNIT * REG_UNIT", "regs * 32", id="no register unit"),
    pytest.param("(smem + BLOCK_SMEM_RESERVED)", "max(smem, 1)", id="no reserved shared memory"),
    pytest.param("min(SM_BLOCKS, SM_WARPS // warps,", "min(SM_WARPS // warps,", id="no block limit"),
    pytest.param("SM_WARPS // warps, by_regs", "by_regs", id="no warp limit"),
    pytest.param("SM_REGISTERS // warp_regs // warps", "SM_REGISTERS // (regs * threads)", id="registers per thread"),
])
def test_blocks_per_sm_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 11.4"):
        checks.check_blocks_per_sm(mutant(blocks_per_sm, old, new))


@pytest.mark.parametrize("old, new, binds", [
    pytest.param("(regs * 32 + REG_UNIT - 1) // REG_UNIT * REG_UNIT", "regs * 32", "registers", id="no register unit"),
    pytest.param("(smem + BLOCK_SMEM_RESERVED)", "max(smem, 1)", "shared memory", id="no reserved shared memory"),
    pytest.param("min(SM_BLOCKS, SM_WARPS // warps,", "min(SM_WARPS // warps,", "the per-SM block limit",
                 id="no block limit"),
    pytest.param("SM_WARPS // warps, by_regs", "by_regs", "warps (threads)", id="no warp limit"),
])
def test_blocks_per_sm_failure_names_the_binding_limit_and_what_each_allows(old, new, binds):
    """A wrong answer gets, for the failing case, what each of the four limits alone allows in the reference and
    which binds there (the term the student got wrong shows), in numbers, not the formula's code."""
    with pytest.raises(CheckFailure, match="Exercise 11.4") as e:
        checks.check_blocks_per_sm(mutant(blocks_per_sm, old, new))
    msg = str(e.value)
    assert "each limit alone allows: the per-SM block limit 32, warps (threads) " in msg, msg
    assert re.search(r"registers \d+, shared memory \d+;", msg), msg
    assert f"the one that binds (the smallest): {binds}, at " in msg, msg
    assert not any(code in msg for code in ("//", "REG_UNIT", "SM_", "min(")), msg  # numbers, not the formula


# --- the spec's letter (Python integers, 0 when nothing fits) and a partial warp rounded down ---------

@pytest.mark.parametrize("old, new", [
    pytest.param("(threads + 31) // 32", "max(1, round(threads / 32))", id="warps rounded"),   # 40 threads, 255 regs: 8 for 4
    pytest.param("SM_REGISTERS // warp_regs // warps", "SM_REGISTERS / warp_regs // warps", id="a float"),
    pytest.param("min(SM_BLOCKS, ", "min(np.int64(SM_BLOCKS), ", id="a NumPy integer"),
    pytest.param("SM_SMEM // (smem + BLOCK_SMEM_RESERVED)", "max(1, SM_SMEM // (smem + BLOCK_SMEM_RESERVED))",
                 id="never 0 by shared memory"),
])
def test_blocks_per_sm_check_rejects_issue48(old, new):
    with pytest.raises(CheckFailure, match="Exercise 11.4"):
        checks.check_blocks_per_sm(mutant(blocks_per_sm, old, new))


def test_the_check_tries_the_fused_kernels_own_block():
    """Exercise 11.4 sits where the fused kernel needs it: an answer wrong only for that kernel's block (its THREADS,
    REGS and block_smem(TK, CHUNK), as ptxas gave them) fails, naming the kernel."""
    from course.fused import CHUNK, REGS, THREADS, TK, block_smem

    def wrong_for_the_fused_block(threads, regs, smem):
        """Right but for the fused kernel's block, where it says two blocks fit."""
        fused = (threads, regs, smem) == (THREADS, REGS, block_smem(TK, CHUNK))
        return 2 if fused else blocks_per_sm(threads, regs, smem)
    with pytest.raises(CheckFailure, match=r"Exercise 11\.4.*course\.fused's kernel"):
        checks.check_blocks_per_sm(wrong_for_the_fused_block)
