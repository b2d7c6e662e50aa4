"""Checks for notebook 02's exercises: the naive matmul, the tiled matmul's loading phase, the fused epilogue."""
import numpy as np

import course
from course.checks.core import exercise, on_a_gpu, run_cases, run_sampled
from course.runtime.util import cdiv

TILE = 16  # notebook 02's tile: the tiled kernels' block is (TILE, TILE), fixed by their spec

ATOL = RTOL = 1e-4  # float32 sums of <= 100 products of N(0, 1) numbers, accumulated in another order than BLAS
DEEP_ATOL = 1e-3    # the deep cases: sums of up to 1,571 such products (about 40 in size)


def _matrices(rng, M, K, N):
    return (rng.standard_normal((M, K)).astype(np.float32),   # (M, K)
            rng.standard_normal((K, N)).astype(np.float32))   # (K, N)


def _zero_lines(A, B):
    """Zero A's first row and B's last column, so that some elements of A @ B are exactly 0 (a sum of zeros): an
    answer that writes only where the sum is non-zero leaves them unwritten."""
    A[0] = 0
    B[:, -1] = 0
    return A, B


def _tall(rng, M, K, N, block):
    """A case of M rows (past twice the notebook's batch of 64), for run_sampled: in the simulator only the first
    and the last row of blocks run."""
    A, B = _zero_lines(*_matrices(rng, M, K, N))
    grid = (cdiv(N, block[0]), cdiv(M, block[1]))
    return dict(name=f"A {A.shape} @ B {B.shape}", grid=grid, block=block, inputs=[A, B], expected=A @ B,
                keep=lambda b: b[1] in (0, grid[1] - 1))


def _cases(rng, shapes_blocks, extra_blocks=(0, 0)):
    cases = []
    for k, ((M, K, N), block) in enumerate(shapes_blocks):
        A, B = _matrices(rng, M, K, N)
        if k % 2 == 0:
            A, B = _zero_lines(A, B)
        grid = (cdiv(N, block[0]) + extra_blocks[0], cdiv(M, block[1]) + extra_blocks[1])
        cases.append(dict(name=f"A {A.shape} @ B {B.shape}", grid=grid, block=block, inputs=[A, B],
                          expected=A @ B))
    return cases


@exercise("2.1", nudges=(
    "One thread per element of C: which row and column does this thread own, and which grid axis walks the "
    "columns (x)?",
    "An element of C is the dot product of a row of A and a column of B over the dimension they share: how "
    "long is it? Where does the sum start, and in which type (a float32 zero, not a bare 0.0)?",
), more="""\
  col, row = cuda.grid(2)                     # x walks the columns of C
  if row < C.shape[0] and col < C.shape[1]:
      acc = np.float32(0.0)
      for k in range(A.shape[1]):
          acc += A[row, k] * B[k, col]
      C[row, col] = acc""")
def check_matmul_kernel(kernel, seed=0):
    """Exercise 2.1: C = A @ B, one thread per element, x over columns; odd and whole-block shapes, three
    block shapes, spare blocks.

    Domain: N(0, 1) float32 of both signs, with a zero row of A and a zero column of B in every other case (some
    sums exactly 0); K from 6 to 1,571 (twice MNIST's 784 inputs: one deep case of few threads); M up to 300 rows
    (past twice the notebook's batch of 64; in the simulator only its first and last rows of blocks run); blocks
    (8, 8) to (32, 32) (the largest on a GPU only), spare blocks."""
    rng = np.random.default_rng(seed)
    cases = _cases(rng, [((19, 37, 23), (16, 16)), ((9, 50, 33), (32, 4)), ((course.pick(70, 6), 8, 5), (8, 8)),
                         *on_a_gpu(((21, 6, 19), (32, 32))),                               # the largest block
                         ((32, 20, 48), (16, 16)), ((8, 9, 64), (32, 4))])   # the last two: whole blocks
    cases += _cases(rng, [((13, 11, 21), (8, 8))], extra_blocks=(1, 2))  # spare blocks must do nothing
    hint = ("look at which grid axis walks C's columns (x) and which its rows, at the guard on both of C's "
            "dimensions (whatever their size), at where the sum starts (a float32 zero), at the range of k: A's "
            "columns, which are B's rows (all of them), and at the write: every element, a sum of 0 too")
    done = run_cases("Exercise 2.1", kernel, cases, atol=ATOL, rtol=RTOL, hint=hint)
    run_sampled("Exercise 2.1", kernel, _cases(rng, [((3, 2 * 784 + 3, 5), (8, 4))]),  # a sum of 1,571 products
                hint, atol=DEEP_ATOL, rtol=RTOL)
    run_sampled("Exercise 2.1", kernel, [_tall(rng, 300, 3, 2, (2, 64))], hint, atol=ATOL, rtol=RTOL)
    return done + ", one of 300 rows"


@exercise("2.2", nudges=(
    "Each thread loads ONE element of A's tile and one of B's per step: which row and column of A does its "
    "(ty, tx) pick at the tile's offset k0, and which of B?",
    "Where a tile hangs over the matrix's edge, which value adds nothing to the dot product? And why must "
    "every thread of the block reach each cuda.syncthreads(), even a thread outside C?",
), more="""\
  each thread loads ONE element of each tile, or a zero where that index is outside A or B:
      sA[ty, tx] = A[row, k0 + tx]   if row < M and k0 + tx < K   else np.float32(0.0)
      sB[ty, tx] = B[k0 + ty, col]   if k0 + ty < K and col < N   else np.float32(0.0)
  every thread reaches every cuda.syncthreads(): never skip the loads or return early""")
def check_tiled_matmul(kernel, seed=0):
    """Exercise 2.2: the tiled matmul (its tile loading) on odd and whole-tile shapes, exact and oversized grids.

    Domain: as 2.1's values (zero lines in every other case: sums exactly 0); blocks (TILE, TILE) as the spec
    fixes; K from 21 to 200 in the simulator (13 tiles: each tile costs every thread two barriers there) and
    1,571 on a GPU (twice MNIST's 784); M up to 131 rows (past twice the notebook's batch of 64; in the simulator
    only the first and last rows of blocks run); spare blocks."""
    rng = np.random.default_rng(seed)
    cases = _cases(rng, [((19, 37, 23), (16, 16)), ((1, 40, 5), (16, 16)), ((32, 48, 16), (16, 16))])
    cases += _cases(rng, [((course.pick(33, 17), 21, 17), (16, 16))], extra_blocks=(1, 1))
    hint = ("look at the tile loads: one element of A's tile and one of B's per thread, each bounds-checked "
            "against the matrix it comes from (rows AND columns, whatever their size), with a zero where the "
            "tile hangs over the edge; at the loop over ALL of K's tiles; at the write of every element, a sum of "
            "0 too; every thread must reach every barrier")
    done = run_cases("Exercise 2.2", kernel, cases, atol=ATOL, rtol=RTOL, largest=TILE * TILE,  # the tile's block
                     hint=hint)
    run_sampled("Exercise 2.2", kernel, _cases(rng, [((3, course.pick(2 * 784 + 3, 200), 5), (16, 16))]),
                hint, atol=DEEP_ATOL, rtol=RTOL)  # deep: many tiles along K
    run_sampled("Exercise 2.2", kernel, [_tall(rng, 131, 5, 3, (TILE, TILE))], hint, atol=ATOL, rtol=RTOL)
    return done + ", one of 131 rows"


@exercise("2.3", nudges=(
    "Which bias goes with the output in row `row`, column `col`: there is one bias per output feature, and "
    "the features are the columns.",
    "Which comes first, the bias or the ReLU? Does the ReLU apply when relu is 0? And is every read, the "
    "bias's too, inside the guard?",
), more="""\
  if row < Y.shape[0] and col < Y.shape[1]:       # everything, the bias read included, inside the guard
      acc = dot of X's row and W's column (as in 2.1)
      acc += b[col]                               # one bias per output feature (column)
      if relu != 0 and acc < 0: acc = np.float32(0.0)
      Y[row, col] = acc""")
def check_linear_kernel(kernel, seed=0):
    """Exercise 2.3: Y = X @ W + b (+ ReLU when relu != 0) on odd and whole-block shapes, with and without ReLU.

    Domain: as 2.1's values, b of both signs with an exact 0 (with X's zero row: outputs exactly 0 before the
    ReLU); relu the ints 1 (what the course's launcher passes), 0, and other non-zero values (2, -3), since the
    spec says non-zero; blocks (TILE, TILE); M up to 131 rows (past twice the notebook's batch of 64; in the
    simulator only the first and last rows of blocks run); spare blocks."""
    rng = np.random.default_rng(seed)
    cases = []
    for k, ((M, K, N), relu, extra) in enumerate((((19, 37, 23), 1, (0, 0)), ((18, 21, 35), 0, (0, 0)),
                                                  ((5, 30, 17), 2, (1, 1)), ((7, 9, 3), 0, (1, 0)),
                                                  ((32, 12, 16), -3, (0, 0)), ((16, 7, 32), 0, (0, 0)),  # whole
                                                  ((131, 5, 3), 1, (0, 0)))):  # tall: sampled, below
        X, W = _matrices(rng, M, K, N)
        b = rng.standard_normal(N).astype(np.float32)  # (N,), both signs so the ReLU has work to do
        if k % 2:
            X, W = _zero_lines(X, W)
            b[-1] = 0  # Y[0, -1] is exactly 0: a sum of zeros plus a zero bias
        Y = X @ W + b
        grid = (cdiv(N, 16) + extra[0], cdiv(M, 16) + extra[1])
        cases.append(dict(name=f"X {X.shape} @ W {W.shape} + b, relu={relu}", grid=grid, block=(16, 16),
                          inputs=[X, W, b, relu], expected=np.maximum(Y, 0) if relu else Y))
    cases[-1]["keep"] = lambda b, last=cases[-1]["grid"][1] - 1: b[1] in (0, last)
    hint = ("look at which threads write (only those inside Y, whatever its size, and each of them, a sum of 0 "
            "too), which element of b goes with an output (one bias per output feature), whether the ReLU "
            "depends on relu being non-zero (any non-zero value, not only 1), and whether the bias is added before "
            "the clamp")
    done = run_cases("Exercise 2.3", kernel, cases[:-1], atol=ATOL, rtol=RTOL, largest=TILE * TILE,  # the tile's
                     hint=hint)                                                                     # block
    run_sampled("Exercise 2.3", kernel, cases[-1:], hint, atol=ATOL, rtol=RTOL)
    return done + ", one of 131 rows"
