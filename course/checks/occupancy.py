"""Checks for notebook 11's fourth exercise (occupancy: how many blocks of a kernel an SM holds)."""
import numpy as np

from course.checks.core import call, exercise, fail, plain
from course.fused import (BLOCK_SMEM_RESERVED, CHUNK, REG_UNIT, REGS, SM_BLOCKS, SM_REGISTERS, SM_SMEM, SM_WARPS,
                          THREADS, TK, block_smem)

WARP = 32


def blocks_per_sm_ref(threads, regs, smem):
    """Blocks of `threads` threads, `regs` registers a thread and `smem` bytes of shared memory that fit one SM."""
    return min(limits_ref(threads, regs, smem).values())


def limits_ref(threads, regs, smem):
    """{limit: the blocks per SM that limit alone allows} for blocks of `threads` threads, `regs` registers a thread
    and `smem` bytes of shared memory, in the order a failure names them."""
    warps = -(-threads // WARP)                                   # a partial warp still takes a whole warp
    warp_regs = -(-regs * WARP // REG_UNIT) * REG_UNIT             # a warp's registers, rounded up to the unit
    return {"the per-SM block limit": SM_BLOCKS,
            "warps (threads)": SM_WARPS // warps,
            "registers": (SM_REGISTERS // warp_regs) // warps,
            "shared memory": SM_SMEM // (smem + BLOCK_SMEM_RESERVED)}


def _limits_said(threads, regs, smem):
    """What each limit alone allows for this block, and which binds (the smallest), in words: a wrong answer's
    term shows without the formula."""
    limits = limits_ref(threads, regs, smem)
    least = min(limits.values())
    binding = [name for name, n in limits.items() if n == least]
    each = ", ".join(f"{name} {n}" for name, n in limits.items())
    which = "the one that binds (the smallest)" if len(binding) == 1 else "those that bind (tied, the smallest)"
    return f"each limit alone allows: {each}; {which}: {' and '.join(binding)}, at {least} block{'s' if least != 1 else ''}"


@exercise("11.4", nudges=(
    "Four resources each cap how many blocks fit on an SM: the block limit, the warps, the registers and the shared memory. The answer is the smallest of the four caps.",
    "A block of 100 threads still takes whole warps. Registers are handed out per warp in units of 256, and every block's shared memory carries a reserved part: round before you divide.",
), more="""\
  warps = (threads + 31) // 32                                     # whole warps
  warp_regs = (regs * 32 + 255) // 256 * 256                       # a warp's registers, in units of 256
  return min(SM_BLOCKS, SM_WARPS // warps, SM_REGISTERS // warp_regs // warps,
             SM_SMEM // (smem + BLOCK_SMEM_RESERVED))""")
def check_blocks_per_sm(blocks_per_sm, seed=0):
    """Exercise 11.4. Domain: the kernels of notebooks 12 and 15 (the appendix's matmuls); random block sizes (1 to 1,024 threads, whole warps
    and not, a partial warp of 8 just above a whole one: 40 threads), registers (16 to 255) and shared memory (0 to
    past the SM's), each of the four limits binding in some case and 0 blocks (by registers, by shared memory) in
    others; the answer a Python int, as the spec says (not a float, bool or NumPy integer)."""
    ex = "Exercise 11.4"
    rng = np.random.default_rng(seed)
    known = [(256, 122, 8448, "matmul v3"), (256, 128, 16896, "matmul v4"), (THREADS, REGS, block_smem(TK, CHUNK), "course.fused's kernel"),
             (32, 16, 0, "a tiny kernel: the block limit"), (1024, 32, 0, "1024 threads: the warp limit"),
             (128, 40, 100000, "large shared memory"), (96, 255, 0, "255 registers"),
             (40, 255, 0, "a warp and a quarter, 255 registers"), (1024, 255, 0, "not one block: registers"),
             (64, 32, 240_000, "not one block: shared memory"), (33, 64, 232_448, "the last byte of shared memory")]
    cases = known + [(int(rng.integers(1, 1025)), int(rng.integers(16, 256)), int(rng.integers(0, 120000)), "random")
                     for _ in range(40)]
    for threads, regs, smem, what in cases:
        case = f"threads={threads}, regs={regs}, smem={smem} ({what})"
        got = call(ex, f"with {case}", blocks_per_sm, threads, regs, smem)
        want = blocks_per_sm_ref(threads, regs, smem)
        if type(got) is not int:
            fail(ex, f"with {case}", f"expected a Python int, got {type(got).__name__} {plain(got)}",
                 "count with integers: // rounds down and keeps an int, / gives a float; int(...) turns a NumPy "
                 "integer into a Python one")
        if got != want:
            fail(ex, f"with {case}", f"expected {want} blocks per SM, got {plain(got)}. In the reference, "
                 f"{_limits_said(threads, regs, smem)}: which of these does your answer get wrong?",
                 "take the smallest of four limits: blocks (32), warps (64, a partial warp counts whole), registers "
                 "(65,536, given to each warp in units of 256) and shared memory (233,472 bytes, each block also "
                 "keeping 1,024 for the system)")
    return f"{len(cases)} block shapes (each of the four limits binding in some)"
