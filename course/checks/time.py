"""Checks for notebook 08's exercises (the cost of an epoch, the batch indices of a replayed CUDA graph)."""
import numpy as np

import course
from course.checks.core import MAX_THREADS, call, exercise, fail, on_a_gpu, run_cases

FLOAT_BYTES = 4  # float32


def epoch_cost_ref(n_train, n_in, hidden, n_out, batch_size):
    """(FLOPs, bytes) of one epoch of SGD on the n_in-hidden-n_out MLP, as notebook 08 counts them."""
    steps = n_train // batch_size
    seen = steps * batch_size                                       # the partial batch is dropped, as fit does
    params = n_in * hidden + hidden + hidden * n_out + n_out
    forward = 2 * (n_in * hidden + hidden * n_out)                  # per example
    backward = 2 * n_in * hidden + 2 * 2 * hidden * n_out           # dW1, then dW2 and dH, per example
    flops = seen * (forward + backward) + steps * 2 * params        # + the update: a multiply and a subtract
    nbytes = seen * n_in * FLOAT_BYTES + steps * 3 * params * FLOAT_BYTES   # images once; p, g read, p written
    return flops, nbytes


@exercise("8.1", nudges=(
    "An epoch is a number of steps; each step does a forward pass, a backward pass and an update. Count each part per example, or per step, and which of the two it is.",
    "A multiply-add counts as two FLOPs. The backward pass makes the gradient of W1, and of W2 and H: which products does each take? Do the biases count among the parameters the update touches?",
), more="""\
  steps = n_train // batch_size                                   # whole batches only
  seen = steps * batch_size                                       # the examples they hold
  params = n_in * hidden + hidden + hidden * n_out + n_out        # the biases count too
  flops = seen * (2 * (n_in * hidden + hidden * n_out)            # forward
                  + 2 * n_in * hidden + 4 * hidden * n_out)       # dW1; dW2 and dH
  flops += steps * 2 * params                                     # the update
  nbytes = 4 * (seen * n_in + steps * 3 * params)""")
def check_epoch_cost(epoch_cost, seed=0):
    """Exercise 8.1. Domain: MNIST's own sizes; random layer sizes and training sets (whole batches and a
    remainder, batch sizes 1 to 100); a training set smaller than one batch (0 steps: 0 FLOPs, 0 bytes); an
    epoch of the race's largest batch (512); two Python ints back, as the spec says (not floats or NumPy
    integers)."""
    ex = "Exercise 8.1"
    rng = np.random.default_rng(seed)
    sizes = [(60000, 784, 128, 10, 64)] + [
        (int(rng.integers(10, 5000)), int(rng.integers(1, 900)), int(rng.integers(1, 300)), int(rng.integers(1, 20)),
         int(rng.choice([1, 7, 32, 64, 100]))) for _ in range(12)]
    sizes.append((640, 3, 5, 2, 64))                                # exactly 10 batches
    sizes.append((50, 784, 128, 10, 64))                            # not one whole batch: 0 steps
    sizes.append((60000, 784, 1024, 10, 512))                       # the race's largest batch, a wide layer
    for n_train, n_in, hidden, n_out, batch_size in sizes:
        case = f"n_train={n_train}, an {n_in}-{hidden}-{n_out} MLP, batch_size={batch_size}"
        got = call(ex, f"with {case}", epoch_cost, n_train, n_in, hidden, n_out, batch_size)
        want = epoch_cost_ref(n_train, n_in, hidden, n_out, batch_size)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(ex, f"with {case}", f"expected a tuple (flops, nbytes), got {got!r}", "return both counts")
        if not all(type(v) is int for v in got):
            fail(ex, f"with {case}", f"expected two Python integers, got {tuple(type(v).__name__ for v in got)}",
                 "count with integer arithmetic: // for the steps, no / (which gives a float); int(...) turns a "
                 "NumPy integer into a Python one")
        _compare_cost(ex, case, got, want)
    return f"{len(sizes)} MLPs and training sets (whole batches, a remainder, not one batch)"


HINTS_8_1 = ("count, for the examples of the whole batches only (steps x batch_size), the forward pass (2 FLOPs per weight and example), the backward pass (dW1, dW2 and dH, not the "
             "gradient with respect to the images) and the update (2 FLOPs per parameter, biases included, per WHOLE "
             "batch: steps = n_train // batch_size)",
             "count the images of the whole batches once (float32: 4 bytes a pixel) and, every step (whole batches only), each parameter "
             "read, its gradient read and the parameter written (4 bytes each)")


def _compare_cost(ex, case, got, want):
    """Fail on the first of (FLOPs, bytes) that differs, with what to look at for it."""
    __tracebackhide__ = True
    for k, name in enumerate(("FLOPs", "bytes")):
        if float(got[k]) != want[k]:
            fail(ex, f"with {case}", f"{name}: expected {want[k]:,}, got {got[k]:,} (off by {float(got[k]) - want[k]:+,.0f})",
                 HINTS_8_1[k])


@exercise("8.2", nudges=(
    "One block fills the whole batch of indices: which slice of the permutation is batch number counter[0], and where does it start?",
    "The batch may be larger than the block: each thread then writes several indices. By how much does a thread jump each time, when the whole grid is one block?",
), more="""\
  base = counter[0] * idx.shape[0]                              # batch number counter[0] starts at its number x B
  for i in range(cuda.threadIdx.x, idx.shape[0], cuda.blockDim.x):   # one block: stride by the block
      idx[i] = perm[base + i]""")
def check_batch_index(kernel, seed=0):
    """Exercise 8.2. Domain: idx = perm[counter[0] * B : (counter[0] + 1) * B] from ONE block of 16 to 128 threads
    (1,024 on a GPU), for batches of 20 to 300 rows (1,500 on a GPU), smaller and larger than the block, whole
    blocks and not; the first, a middle and the last batch of an int64 permutation with a partial batch at its end;
    nothing else written."""
    rng = np.random.default_rng(seed)
    cases = []
    for B, threads, batches, which in ((64, 32, 5, "last"), (37, 32, 9, "middle"), (course.pick(300, 100), 64, 4, "first"),
                                       (128, 128, 3, "middle"), (20, 64, 6, "middle"), (45, 16, 6, "middle"),
                                       *on_a_gpu((1_500, MAX_THREADS, 3, "last"))):   # the largest block
        perm = rng.permutation(B * batches + int(rng.integers(0, B))).astype(np.int64)   # (n,): a partial batch at the end
        k = {"first": 0, "last": batches - 1}.get(which, int(rng.integers(1, batches - 1)))
        counter = np.array([k], np.int64)
        cases.append(dict(name=f"counter[0] = {k}: batch {k} of 0-{batches - 1} (B={B})", grid=1, block=threads, inputs=[perm, counter],
                          expected=perm[k * B:(k + 1) * B].copy()))
    return run_cases("Exercise 8.2", kernel, cases,
                     hint="look at where batch number counter[0] starts in perm (its number times the batch size), "
                          "and at the loop: one block must cover all B indices, whatever the block's size")
