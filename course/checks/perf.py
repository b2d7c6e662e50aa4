"""Checks for the exercises of notebooks 10 (a grid-stride SGD) and 15, the appendix (the register-blocked matmul)."""
from math import prod

import numpy as np

import course
from course.checks.core import MAX_THREADS, exercise, on_a_gpu, run_cases, run_inplace_steps
from course.update import sgd_ref
from course.runtime.util import cdiv

ATOL = RTOL = 1e-4  # float32 sums of <= 140 products of N(0, 1) numbers, accumulated in another order than BLAS


@exercise("15.1", nudges=(
    "tile_product only adds to acc: for one k, which TM values of A's tile and which TN of B's does this thread "
    "need, and how many multiply-adds do they make? Then, how many values of k does one pair of tiles hold?",
    "Which rows of the tile does this thread own? The same strided ones that the kernel's epilogue writes (ty, then "
    "TY further, and so on), and likewise the columns; sA holds A's tile transposed, k first.",
), more="""\
  for kk in range(BK):                               # every kk of the tile
      for i in range(TM): a[i] = sA[kk, ty + TY * i]     # the same strided rows ...
      for j in range(TN): b[j] = sB[kk, tx + TX * j]     # ... and columns as the epilogue that writes C
      for i in range(TM):
          for j in range(TN): acc[i, j] += a[i] * b[j]""")
def check_matmul_v3(kernel, seed=0):
    """Exercise 15.1. Domain: the register-blocked matmul (its tile_product) on odd shapes (not multiples of the
    128x128 tile nor of BK = 8: K from 9 to 37, several k-tiles), two row tiles and two column tiles, whole tiles, with exact and
    oversized grids; N(0, 1) values of both signs; blocks of (16, 16) threads, as the kernel's tiling requires."""
    from course.matmul import BM, BN, V3_BLOCK
    rng = np.random.default_rng(seed)
    cases = []
    shapes = [((19, 37, 23), (1, 0)), ((course.pick(140, 130), 9, 5), (0, 0)),   # spare blocks; two row tiles
              ((3, 20, course.pick(150, 131)), (0, 1)),                          # two column tiles; spare row
              ((BM, 16, course.pick(2 * BN, BN)), (0, 0))]                      # whole tiles: no edge at all
    for (M, K, N), extra in shapes:
        A = rng.standard_normal((M, K)).astype(np.float32)      # (M, K)
        B = rng.standard_normal((K, N)).astype(np.float32)      # (K, N)
        grid = (cdiv(N, BN) + extra[0], cdiv(M, BM) + extra[1])
        cases.append(dict(name=f"A {A.shape} @ B {B.shape}", grid=grid, block=V3_BLOCK, inputs=[A, B],
                          expected=A @ B, unit=(BN, BM)))  # a tile of C is what sizes are multiples of
    return run_cases("Exercise 15.1", kernel, cases, atol=ATOL, rtol=RTOL, largest=prod(V3_BLOCK),  # fixed block
                     hint="in tile_product, look at which rows of sA and columns of sB a thread reads into its "
                          "registers (the same strided ones the epilogue writes to C), at whether every kk of the tile "
                          "is used, and at the outer product: every (i, j) pair of the thread's TM x TN block, added")


def _real_magnitudes(rng, n, scale):
    """n values as a training run has them: a quarter exactly 0; the rest N(0, scale) (parameters) or, for
    scale=None, gradients of magnitude 1e-7 to 1e-2 and either sign."""
    v = rng.standard_normal(n) * scale if scale else rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-7, -2, n)
    v[rng.random(n) < 0.25] = 0
    return v


LOOP_HINT_10_1 = ("look at where a thread's loop starts (its index in the whole grid) and how far it steps (the number "
                  "of threads in the whole grid, not the block): every element exactly once, for grids smaller and "
                  "larger than the array")
FORMULA_HINT_10_1 = ("every element changed, and not by whole repeats of the right step: the loop reached each "
                     "element once, so look at the update itself. A step moves each parameter AGAINST its gradient "
                     "(which sign?), by the gradient times the learning rate (is lr in it, once?), in place")


def _sgd_diagnose(name, got, expected, before):
    """The update's formula, not the loop, when every wrong element moved by something other than k >= 2 whole
    steps (the same element updated by k threads: a loop that starts or strides wrong); else None (the loop hint)."""
    got, expected, before = (np.asarray(a, np.float64) for a in (got, expected, before))
    step = expected - before                                     # the right step, per element
    wrong = ~np.isclose(got, expected, atol=1e-5, rtol=1e-4)
    if not wrong.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.round((got - before) / step)
    repeats = (k >= 2) & np.isclose(got, before + k * step, atol=1e-5, rtol=1e-4) & (np.abs(step) > 1e-6)
    return FORMULA_HINT_10_1 if (wrong & ~repeats).any() else None


@exercise("10.1", nudges=(
    "A grid too small for p: each thread handles several elements. Where does a thread start, and how far "
    "does it jump each time?",
    "Start at the GLOBAL index and jump by the number of threads of the whole GRID, not of the block. "
    "(A while loop: a range whose step is known only at run time divides, in 64 bits, to count its trips.)",
), more="""\
  i = cuda.grid(1)                  # start at the GLOBAL index
  stride = cuda.gridsize(1)         # jump by the threads of the whole GRID
  while i < p.size:                 # a while loop: a range with this run-time step divides (64-bit) to count
      p[i] -= lr * g[i]             # its trips (notebook 10)
      i += stride""")
def check_sgd_gridstride(kernel, seed=0):
    """Exercise 10.1. Domain: p -= lr * g in place, two steps (repeated launches on the same p), for grids too small
    (each thread must loop: one block of 32 threads over 1,000 elements; 96 threads over the simulator's 131-element
    case) and too large (spare threads), the largest block on a GPU; values N(0, 1) and the course's own magnitudes
    (parameters at exactly 0, as biases start, and small; gradients from 1e-7 to 1e-2 of both signs, and exact
    zeros: a skipped small gradient or parameter at 0 fails)."""
    rng = np.random.default_rng(seed)
    cases = []
    for n, grid, block, real in ((course.pick(1000, 200), 1, 32, False), (course.pick(999, 131), 3, 32, True),
                                 (37, 4, 32, False), *on_a_gpu((2_500, 1, MAX_THREADS, False)),   # the largest block
                                 (course.pick(5000, 300), 2, 64, False), (course.pick(4096, 256), 2, 64, False)):
        p = (_real_magnitudes(rng, n, 0.05) if real else rng.standard_normal(n)).astype(np.float32)
        steps, cur = [], p
        for _ in range(2):
            g = (_real_magnitudes(rng, n, None) if real else rng.standard_normal(n)).astype(np.float32)
            lr = np.float32(rng.uniform(0.01, 0.5))
            cur = sgd_ref(cur, g, lr)
            steps.append((g, (lr,), (cur,)))
        cases.append(dict(name=f"{n} parameters, {grid * block} threads{real * ' (the course magnitudes)'}", grid=grid,
                          block=block, names=["p"], state=[p], steps=steps))
    return run_inplace_steps("Exercise 10.1", kernel, cases, hint=LOOP_HINT_10_1, diagnose=_sgd_diagnose)
