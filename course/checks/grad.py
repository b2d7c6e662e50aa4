"""Checks for notebook 04's exercises: dZ2, the transposed product dW = A^T dZ, the ReLU mask."""
import numpy as np

import course
from course.checks.core import exercise, factor, on_a_gpu, run_cases, run_sampled
from course.runtime.util import cdiv

TOL = 1e-5  # float32: dZ2 is one subtraction and one division; the products sum <= 60 terms of size ~1


def _probs(rng, B, C):
    z = rng.standard_normal((B, C)) * 3
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32)  # (B, C), rows sum to 1


def _tall_keep(grid):
    """Keep (core.run_sampled) the first and the last row of blocks of a 2-D grid: a row guard shows there."""
    return lambda b: b[1] in (0, grid[1] - 1)


def _batch_factor(got, expected):
    """Name a constant factor between got and expected: the forgotten (or doubled) division by B."""
    c = factor(got, expected)
    if c is None:
        return None
    return (f"Every element is {c:.4g} times the expected one: a constant factor, so the formula's shape is "
            "right; look at the division by the batch size (the loss is a mean over the rows)")


@exercise("4.1", nudges=(
    "dZ is (probs - onehot(y)) / B: for the element in row r and column j, when is the one-hot 1?",
    "The loss is a mean over the B rows: which division does that put into every element of its gradient, and "
    "in which type (a float32)?",
), more="""\
  j, r = cuda.grid(2)                       # x over the C classes, y over the B rows
  if r < dZ.shape[0] and j < dZ.shape[1]:
      g = probs[r, j]
      if j == y[r]: g -= np.float32(1.0)
      dZ[r, j] = g / np.float32(probs.shape[0])   # the mean's 1 / B""")
def check_dlogits_kernel(kernel, seed=0):
    """Exercise 4.1: dZ = (probs - onehot(y)) / B on odd and whole-block sizes, C = 10, 7 and 8.

    Domain: probabilities from softmax of N(0, 3) logits, and rows as the course's confident predictions give
    them: exactly 1 at the label and 0 elsewhere (dZ exactly 0), or exactly 0 at the label; int64 labels; B from
    3 to 300 rows (past twice the notebook's batch of 64; in the simulator only the first and last rows of blocks
    of that case run); C of 3, 7, 8, 10; blocks (2, 8) to (32, 32) (the largest on a GPU only)."""
    rng = np.random.default_rng(seed)
    cases = []
    for (B, C), block in (((course.pick(37, 13), 10), (16, 16)), ((21, 7), (8, 4)), ((3, 10), (32, 2)),
                          *on_a_gpu(((19, 10), (32, 32))),                          # the largest block
                          ((16, 10), (2, 8)), ((32, 8), (8, 4)),   # the last two: whole blocks
                          ((300, 3), (4, 16))):                    # a batch of 300 rows: sampled, below
        probs = _probs(rng, B, C)
        y = rng.integers(0, C, B)
        probs[0] = np.eye(C, dtype=np.float32)[y[0]]              # a certain, right prediction: dZ's row is 0
        probs[-1] = np.eye(C, dtype=np.float32)[(y[-1] + 1) % C]  # a certain, wrong one: the label's p is 0
        expected = ((probs - np.eye(C, dtype=np.float32)[y]) / np.float32(B)).astype(np.float32)
        cases.append(dict(name=f"probs {probs.shape}", grid=(cdiv(C, block[0]), cdiv(B, block[1])), block=block,
                          inputs=[probs, y], expected=expected))
    hint = ("look at the grid axes (x over classes, y over rows), the guard on both of dZ's dimensions "
            "(whatever the batch size), where the 1 of the one-hot label is subtracted, the batch mean, and the "
            "write: every element, a gradient of exactly 0 too")
    cases[-1]["keep"] = _tall_keep(cases[-1]["grid"])
    done = run_cases("Exercise 4.1", kernel, cases[:-1], atol=TOL, rtol=TOL, diagnose=_batch_factor, hint=hint)
    run_sampled("Exercise 4.1", kernel, cases[-1:], hint, atol=TOL, rtol=TOL, diagnose=_batch_factor)
    return done + ", one of 300 rows"


@exercise("4.2", nudges=(
    "C is A^T B: its element (i, j) is a sum over the rows that A and B share. After the transpose, which "
    "index of A is i?",
    "Guard both of C's dimensions; which grid axis walks C's columns?",
), more="""\
  j, i = cuda.grid(2)                        # C is (M, N): x over its columns j, y over its rows i
  if i < C.shape[0] and j < C.shape[1]:
      acc = sum over r in range(A.shape[0]) of A[r, i] * B[r, j]   (A read down a column: the transpose)
      C[i, j] = acc""")
def check_matmul_tn_kernel(kernel, seed=0):
    """Exercise 4.2: C = A^T @ B for A (R, M), B (R, N) on odd and whole-block shapes, three block shapes.

    Domain: N(0, 1) float32 of both signs, with a zero column of A in every other case (a dead ReLU unit's column
    of H: C's row exactly 0); R, the batch rows summed over, from 5 to 1,031 (past twice the notebook's 64, in a
    case of few threads); M up to 131 (in the simulator only the first and last rows of blocks of that case run);
    blocks (8, 8) to (32, 32) (the largest on a GPU only)."""
    rng = np.random.default_rng(seed)
    cases = []
    for k, ((R, M, N), block) in enumerate((((23, 19, 10), (16, 16)), ((course.pick(45, 9), 33, 17), (32, 4)),
                                            *on_a_gpu(((7, 21, 10), (32, 32))),     # the largest block
                                            ((5, 7, 40), (8, 8)), ((9, 16, 32), (16, 16)), ((12, 8, 32), (32, 4)),
                                            ((1031, 3, 2), (2, 4)),                 # deep: a sum over 1,031 rows
                                            ((3, 131, 2), (2, 64)))):               # tall: sampled, below
        A = rng.standard_normal((R, M)).astype(np.float32)  # (R, M): e.g. H, with R = batch rows
        B = rng.standard_normal((R, N)).astype(np.float32)  # (R, N): e.g. dZ2
        if k % 2 == 0:
            A[:, 0] = 0                                     # a dead unit: row 0 of C is exactly 0
        cases.append(dict(name=f"A {A.shape}, B {B.shape}", grid=(cdiv(N, block[0]), cdiv(M, block[1])),
                          block=block, inputs=[A, B], expected=A.T @ B))
    hint = ("look at what the sum runs over (ALL the R rows both matrices share), how A is indexed for its "
            "transpose, the guard on both of C's dimensions (whatever their size), and the write: every element, "
            "a sum of 0 too")
    deep, tall = cases[-2:]
    tall["keep"] = _tall_keep(tall["grid"])
    done = run_cases("Exercise 4.2", kernel, cases[:-2], atol=1e-4, rtol=1e-4, hint=hint)
    run_sampled("Exercise 4.2", kernel, [deep], hint, atol=1e-3, rtol=1e-4)  # sums of 1,031 products
    run_sampled("Exercise 4.2", kernel, [tall], hint, atol=1e-4, rtol=1e-4)
    return done + ", one summing 1,031 rows, one of 131 rows"


@exercise("4.3", nudges=(
    "dH = (dZ W^T) masked by the ReLU: its element (r, i) sums over the output features j. How is W indexed "
    "for its transpose?",
    "Where H is exactly 0 the ReLU passed nothing forward, so it passes no gradient back: which value goes "
    "there, and is that element still written?",
), more="""\
  i, r = cuda.grid(2)                        # dH is (B, n_in): x over i, y over the rows r
  if r < dH.shape[0] and i < dH.shape[1]:
      acc = sum over j in range(dZ.shape[1]) of dZ[r, j] * W[i, j]      # (dZ @ W^T)[r, i]
      dH[r, i] = acc if H[r, i] > 0 else np.float32(0.0)""")
def check_dhidden_kernel(kernel, seed=0):
    """Exercise 4.3: dH = (dZ @ W^T) * [H > 0], where H has many exact zeros, on odd and whole-block shapes.

    Domain: dZ, W N(0, 1) float32 of both signs, dZ's first row exactly 0 (a row the network got exactly right:
    sums of 0 where H > 0); H >= 0 as a ReLU gives it, about half exact zeros; B from 4 to 300 rows (past twice
    the notebook's batch of 64; in the simulator only the first and last rows of blocks of that case run);
    n_out of 5 to 13; blocks (8, 8) to (32, 32) (the largest on a GPU only)."""
    rng = np.random.default_rng(seed)
    cases = []
    for (B, n_in, n_out), block in (((19, 23, 10), (16, 16)), ((course.pick(40, 7), 37, 7), (32, 4)),
                                    *on_a_gpu(((9, 21, 6), (32, 32))),              # the largest block
                                    ((4, 9, 13), (8, 8)), ((8, 32, 10), (32, 4)), ((16, 16, 5), (16, 16)),
                                    ((300, 2, 10), (2, 64))):                       # tall: sampled, below
        dZ = rng.standard_normal((B, n_out)).astype(np.float32)           # (B, n_out)
        dZ[0] = 0                                                         # sums of exactly 0 in dH's row 0
        W = rng.standard_normal((n_in, n_out)).astype(np.float32)         # (n_in, n_out)
        H = np.maximum(rng.standard_normal((B, n_in)), 0).astype(np.float32)  # (B, n_in), ~half exact zeros
        H[0, 0] = 1.0                                                     # and at least one of them unmasked
        expected = ((dZ @ W.T) * (H > 0)).astype(np.float32)
        cases.append(dict(name=f"dZ {dZ.shape}, W {W.shape}, H {H.shape}",
                          grid=(cdiv(n_in, block[0]), cdiv(B, block[1])), block=block,
                          inputs=[dZ, W, H], expected=expected))
    hint = ("look at what the sum runs over (the n_out columns of dZ), how W is indexed for W^T, the mask (ReLU "
            "passes no gradient where H is exactly 0), the guard on dH's rows (whatever the batch size), and "
            "that every element is written, masked ones and sums of 0 too")
    cases[-1]["keep"] = _tall_keep(cases[-1]["grid"])
    done = run_cases("Exercise 4.3", kernel, cases[:-1], atol=1e-4, rtol=1e-4, hint=hint)
    run_sampled("Exercise 4.3", kernel, cases[-1:], hint, atol=1e-4, rtol=1e-4)
    return done + ", one of 300 rows"
