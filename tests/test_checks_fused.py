"""Notebook 10's case-study checks pass the solutions and reject planted wrong answers."""
import pytest
from conftest import mutant
from numba import cuda

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks import fused as checks
from course.fused import warp_sum
from course.ptx import barrier_target, shfl_xor


def test_solutions_pass():
    checks.check_warp_sum(warp_sum)
    checks.check_barrier_target(barrier_target)


def test_different_correct_answers_pass():
    @cuda.jit(device=True)
    def warp_sum_up(scr, v):
        """The butterfly the other way round: masks 1, 2, 4, 8, 16."""
        m = 1
        while m < 32:
            v = v + shfl_xor(scr, v, m)
            m *= 2
        return v

    def barrier_target_ceil(old, blocks):
        """The next multiple of blocks above old, by rounding old + 1 up."""
        return -(-(old + 1) // blocks) * blocks

    checks.check_warp_sum(warp_sum_up)
    checks.check_barrier_target(barrier_target_ceil)


# --- Exercise 11.1: planted wrong butterflies ------------------------------------------------------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("m = 16", "m = 8", id="half-warp sums (starts at 8)"),
    pytest.param("v += shfl_xor(scr, v, m)", "v = shfl_xor(scr, v, m)", id="takes the partner's value"),
    pytest.param("while m > 0:", "while m > 1:", id="stops before mask 1"),
    pytest.param("v += shfl_xor(scr, v, m)", "v += shfl_xor(scr, v, 1)", id="always the neighbour"),
])
def test_warp_sum_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 11.1"):
        checks.check_warp_sum(mutant(warp_sum, old, new))


# --- Exercise 10.2: planted wrong targets ----------------------------------------------------------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("(old // blocks + 1) * blocks", "(old + 1) // blocks * blocks", id="rounds down (a race)"),
    pytest.param("(old // blocks + 1) * blocks", "old + blocks", id="old + blocks (deadlock)"),
    pytest.param("(old // blocks + 1) * blocks", "blocks", id="as if the count started at 0"),
    pytest.param("(old // blocks + 1) * blocks", "(old // blocks + 2) * blocks", id="the next barrier's count"),
])
def test_barrier_target_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 10.2"):
        checks.check_barrier_target(mutant(barrier_target, old, new))
