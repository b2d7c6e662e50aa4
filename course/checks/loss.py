"""Checks for notebook 03's exercises (the stable softmax row, the block reduction, the mean on the device).

The simulator runs GPU threads one at a time (a thread runs until it ends or waits at `cuda.syncthreads()`, and
the blocks of a grid run one after another), which hides the two classic reduction bugs: a missing
`syncthreads` and a missing atomic. The reduction check makes both visible there anyway: while the kernel runs
it fills every new shared (and local) array with NaN, so a cell read before any thread wrote it turns the sum
into NaN, and it counts the atomic adds (one per block). On a GPU, where it cannot do either, it scans the
kernel's code for an atomic and adds a case with thousands of blocks, where a race shows in the total."""
import contextlib
import io
from types import SimpleNamespace

import numpy as np

import course
from course.checks.core import (CheckFailure, check_guards, fail, guarded, guarded_input, launch,
                                raise_if_unimplemented, run_cases)
from course.util import cdiv

SIGNATURES = {  # for tests/test_compile.py: every kernel of notebook 03, as launchers and checks call it
    "course.loss:softmax_xent_kernel": [
        "float32[:, ::1], int64[::1], float32[:, ::1], float32[::1]",
        "float32[:, ::1], int32[::1], float32[:, ::1], float32[::1]",
        "float32[:, :], int64[:], float32[:, :], float32[:]",
        "float32[:, :], int32[:], float32[:, :], float32[:]"],
    "course.loss:sum_kernel": ["float32[::1], float32[::1]", "float32[:], float32[:]"],
    "course.loss:zero_kernel": ["float32[::1]", "int32[::1]", "float32[:]"],
    "course.loss:div_kernel": ["float32[::1], float32", "float32[:], float32"],
    "course.loss:count_correct_kernel": ["float32[:, ::1], int64[::1], int32[::1]",
                                         "float32[:, ::1], int32[::1], int32[::1]",
                                         "float32[:, :], int64[:], int32[:]"],
}


# --- a float64 reference of our own (the checks do not trust the module the notebook exports) ---------------

def _softmax_xent_rows64(logits, y):
    """(losses (B,), probs (B, C)) in float64, by log-sum-exp."""
    z = np.asarray(logits, np.float64)
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    losses = np.log(s[:, 0]) - (z[np.arange(len(z)), y] - m[:, 0])
    return losses, e / s


def _logits(rng, B, C, large):
    """Random logits: N(0, 3), or (large) uniform in [-100, 100] with every third row moved below -150."""
    if not large:
        return (rng.standard_normal((B, C)) * 3).astype(np.float32)
    z = rng.uniform(-100, 100, (B, C))  # a max above 88.7 makes exp overflow float32 (about 4 rows in 10)
    z[::3] -= 250.0                     # every exp of these rows underflows to 0 unless the max is subtracted
    return z.astype(np.float32)


def check_softmax_xent_kernel(softmax_xent_kernel, seed=0):
    """Exercise 3.1: one thread per row writes probs (B, C) and losses (B,); moderate logits, then ones near ±100."""
    raise_if_unimplemented(softmax_xent_kernel)
    ex = "Exercise 3.1"
    rng = np.random.default_rng(seed)
    specs = {False: [(37, 10, 32, np.int64), (50, 7, 16, np.int32)],
             True: [(45, 10, 64, np.int64), (course.pick(60_001, 29), 13, course.pick(128, 8), np.int32)]}
    cases = {}
    for large, shapes in specs.items():
        cases[large] = []
        for B, C, block, itype in shapes:
            z = _logits(rng, B, C, large)
            y = rng.integers(0, C, B).astype(itype)
            losses, probs = _softmax_xent_rows64(z, y)
            what = "near ±100, every third row below -150" if large else "N(0, 3)"
            cases[large].append(dict(name=f"logits ({B}, {C}) {what}, {np.dtype(itype)} labels",
                                     grid=cdiv(B, block), block=block, inputs=[z, y],
                                     expected=(probs.astype(np.float32), losses.astype(np.float32))))
    # float32 throughout: probs within 1e-5 (they are in [0, 1]); losses up to ~350 within a relative 1e-5
    tol = dict(atol=1e-5, rtol=1e-5)
    hints = {False: "one thread per row: r = cuda.grid(1), guard r < logits.shape[0]; write all C probabilities of "
                    "row r, probs[r, c] = exp(z_c - m) / s, and losses[r] = log(s) - (z_y - m)",
             True: "subtract the row's max before exp, with the max started at logits[r, 0] (not 0: a row can lie "
                   "entirely below -100), and compute the loss as log(s) - (z_y - m), never as -log(probs[r, y]): "
                   "that probability underflows to 0 when z_y is far below the max"}
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):  # one summary line at the end, not one per group of cases
        for large in (False, True):
            which = "logits near ±100" if large else "moderate logits"
            try:
                run_cases(ex, softmax_xent_kernel, cases[large], hint=hints[large], **tol)
            except CheckFailure as e:
                if not large:
                    raise
                raise CheckFailure(f"{e}\n  Your kernel passed the cases with moderate logits. With logits near "
                                   "±100 a NaN or inf means exp overflowed (exp(89) is inf in float32) or a whole "
                                   "row underflowed to 0 (0 / 0 is NaN), not that the element was skipped.") from None
            except (ValueError, OverflowError, ZeroDivisionError) as e:
                if not course.SIMULATOR:
                    raise
                # the simulator computes math.log and math.exp in Python, which raise where a GPU returns inf/NaN
                fail(ex, f"with {which}", f"the simulator stopped your kernel: {type(e).__name__}: {e}. Python's "
                     "math.log(0) raises where a GPU returns -inf, so your kernel took the log of 0 (a sum of exps "
                     "that underflowed) or an exp overflowed: on a GPU this row's loss would be inf or NaN",
                     hints[True])
    blocks = sorted({c["block"] for group in cases.values() for c in group})
    print(f"✓ {ex} passed: {sum(map(len, cases.values()))} random cases (half of them with logits near ±100), "
          f"blocks {', '.join(map(str, blocks))}")


# --- instruments for the simulator -----------------------------------------------------------------------

def _poison(a):
    """Fill a fresh array with NaN (floats) or a large sentinel (integers), so that reading it unwritten shows."""
    if a.dtype.kind == "f":
        a.fill(np.nan)
    elif a.dtype.kind in "iu":
        a.fill(np.iinfo(a.dtype).max // 3)
    return a


@contextlib.contextmanager
def simulator_instruments():
    """While a kernel runs in the simulator: new shared and local arrays hold NaN, and atomic adds are counted.

    Yields an object whose `atomic_adds` list gets one entry per `cuda.atomic.add`. On a GPU it does nothing
    (the list stays empty and `active` is False). The simulator allocates shared memory with numpy.empty, which
    often returns memory that happens to hold plausible values; NaN makes a read-before-write show.

    It also makes the simulator's shared-array allocation thread-safe: the simulator looks the array up and
    creates it without a lock, and inside a Jupyter kernel two threads of a block sometimes both create it (each
    then works on its own copy), which would fail a correct kernel here."""
    stats = SimpleNamespace(atomic_adds=[], active=course.SIMULATOR)
    if not course.SIMULATOR:
        yield stats
        return
    from course.device import instruments  # the simulator's internals are patched there, and only there
    with instruments(fill=_poison, atomic_add=stats.atomic_adds.append):  # list.append is atomic under the GIL
        yield stats


def _names(code):
    """Every global and attribute name a function's code (and any code nested in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def check_sum_kernel(sum_kernel, seed=0):
    """Exercise 3.2: total[0] += sum(x), a shared-memory tree per block and one atomic add per block."""
    raise_if_unimplemented(sum_kernel)
    ex = "Exercise 3.2"
    hint = ("each thread stores x[i] (or 0 past the end) in the shared array, syncthreads; then while step > 1: "
            "half = (step + 1) // 2, add s[tid + half] into s[tid] when tid + half < step, syncthreads (outside "
            "the if), step = half; finally thread 0 calls cuda.atomic.add(total, 0, s[0])")
    rng = np.random.default_rng(seed)
    # (n, block): one block; several blocks, the last one part full; blocks that are not powers of two (48,
    # 20); on a GPU thousands of blocks, so that a plain += into total loses additions there
    shapes = [(5, 8), (100, 32), (130, 48), (course.pick(1_000_003, 75), course.pick(256, 20))]
    for n, block in shapes:
        x = rng.uniform(0.5, 1.5, n).astype(np.float32)  # positive: a dropped or doubled element always shows
        start = np.float32(rng.uniform(-50, 50))          # total starts here: the kernel adds, it does not set
        guard = max(block, 4)
        full, total = guarded((1,), np.float32, guard)
        total.copy_to_device(np.array([start], np.float32))
        grid = cdiv(n, block)
        case = f"with n={n}, grid={grid}, block={block} (total starting at {start:.3f})"
        with simulator_instruments() as stats:
            launch(ex, case, sum_kernel, grid, block, [guarded_input(x, guard), total], hint)
        full = full.copy_to_host()
        check_guards(ex, case, full, guard, (1,), hint)
        got, want = float(full[guard]), float(start) + float(x.astype(np.float64).sum())
        diff = got - want
        # float32: a tree of n positive numbers is off by at most ~log2(n) ulps of the total; allow 1e-5
        if not abs(diff) <= 1e-5 * (abs(float(start)) + float(x.sum())):
            sums = x.astype(np.float64).reshape(-1)
            partials = [sums[b * block:(b + 1) * block].sum() for b in range(grid)]
            msg = f"total[0] should be {want:.5f} (start + sum(x)) but is {got:.5f}"
            if np.isnan(got):
                msg += (". NaN: a tree step read a shared cell that no thread had written yet (the check fills "
                        "shared memory with NaN): a cuda.syncthreads() is missing after the load or after a "
                        "step, or threads past the end of x did not store 0")
            elif any(abs(got - p) < 1e-3 * abs(p) for p in partials) or abs(got - (want - start)) < 1e-3 * want:
                msg += (". That is one block's sum, or the sum without the starting value: total[0] was "
                        "overwritten (=) instead of added to (cuda.atomic.add)")
            elif diff < 0:
                msg += (f": short by {-diff:.4f}, about {-diff / x.mean():.1f} elements' worth, so some cells never "
                        "reached s[0]. Is a cuda.syncthreads() missing after a tree step (a thread then reads its "
                        "partner's cell before the partner has added into it)?")
                if block & (block - 1):
                    msg += (f" Or, with this block of {block} threads (not a power of two), does half round down "
                            "(step // 2)? That drops the last cell of every odd step: round up, (step + 1) // 2")
            else:
                msg += f": {diff:.4f} too much, about {diff / x.mean():.1f} elements counted twice"
            fail(ex, case, msg, hint)
        if stats.active and len(stats.atomic_adds) != grid:
            if not stats.atomic_adds:
                fail(ex, case, "the total is right here, but only because the simulator runs the blocks one after "
                     "another: your kernel made no atomic add, and on a GPU blocks that update total[0] with a "
                     "plain += at the same time lose each other's additions", hint)
            fail(ex, case, f"{len(stats.atomic_adds)} atomic adds for {grid} block{'s' * (grid > 1)}: reduce each "
                 "block in shared memory first, then let one thread per block add the block's sum", hint)
    if "atomic" not in _names(getattr(sum_kernel, "py_func", sum_kernel).__code__):
        fail(ex, "(reading the kernel's code)", "sum_kernel never uses cuda.atomic: blocks run at the same time "
             "on a GPU, and a plain total[0] += s[0] loses additions", hint)
    blocks = ", ".join(str(b) for b in sorted({b for _, b in shapes}))
    print(f"✓ {ex} passed: {len(shapes)} random cases, blocks {blocks}"
          + (", shared memory NaN-filled, one atomic add per block" if course.SIMULATOR else ""))


# --- Exercise 3.3: a launcher, checked by calling it ----------------------------------------------------

class _HostCopy(Exception):
    pass


@contextlib.contextmanager
def _no_copy_to_host(*arrays):
    """Make copy_to_host raise _HostCopy on these arrays' classes while the block runs."""
    owners = {next(c for c in type(a).__mro__ if "copy_to_host" in vars(c)) for a in arrays}
    saved = {c: vars(c)["copy_to_host"] for c in owners}

    def refuse(self, *args, **kwargs):
        raise _HostCopy()

    for c in owners:
        c.copy_to_host = refuse
    try:
        yield
    finally:
        for c, f in saved.items():
            c.copy_to_host = f


def check_batch_mean(batch_mean, seed=0):
    """Exercise 3.3: batch_mean(x, out=None) leaves mean(x) in out (1,) on the device, on every call."""
    raise_if_unimplemented(batch_mean)
    from numba import cuda
    ex = "Exercise 3.3"
    hint = ("zero out with zero_kernel, launch sum_kernel on cdiv(n, THREADS) blocks of THREADS threads, then "
            "div_kernel(out, np.float32(n)); no copy_to_host, and return out")
    rng = np.random.default_rng(seed)
    n_big = course.pick(100_003, 300)
    x37 = rng.uniform(0.5, 1.5, 37).astype(np.float32)
    xbig = rng.uniform(0.5, 1.5, n_big).astype(np.float32)
    junk = cuda.to_device(np.array([rng.uniform(500, 1000)], np.float32))  # an `out` that holds an old value
    calls = [("n=37, out=None", x37, None), ("n=37 again, into the out the first call returned", x37, "prev"),
             (f"n={n_big}, into an out that holds {junk.copy_to_host()[0]:.2f}", xbig, junk)]
    prev = None
    for what, x, out in calls:
        case = f"with {what}"
        x_d = cuda.to_device(x)
        out = prev if out == "prev" else out
        try:
            with _no_copy_to_host(x_d, *([out] if out is not None else [])):
                got_arr = batch_mean(x_d) if out is None else batch_mean(x_d, out)
        except _HostCopy:
            fail(ex, case, "batch_mean copied an array to the host", "keep everything on the device: a copy to "
                 "the host makes Python wait for the GPU; " + hint)
        except CheckFailure:
            raise
        except Exception as e:
            fail(ex, case, f"batch_mean raised {type(e).__name__}: {e}", hint)
        if out is not None and got_arr is not out:
            fail(ex, case, "batch_mean did not return the `out` it was given", hint)
        if not hasattr(got_arr, "copy_to_host") or isinstance(got_arr, np.ndarray) \
                or tuple(got_arr.shape) != (1,) or got_arr.dtype != np.float32:
            fail(ex, case, f"expected a (1,) float32 device array, got {type(got_arr).__name__} "
                 f"{getattr(got_arr, 'shape', '')}", hint)
        got = float(got_arr.copy_to_host()[0])
        want = float(x.astype(np.float64).mean())
        if not abs(got - want) <= 1e-5 * want:  # float32 sum of positive numbers: relative error well below 1e-5
            msg = f"the mean of x is {want:.6f}, out holds {got:.6f}"
            if abs(got - want * len(x)) <= 1e-4 * want * len(x):
                msg += ": that is the sum; divide by n"
            elif prev is not None and abs(got - 2 * want) <= 1e-4 * want:
                msg += ": twice the mean, on the second call into the same out: reset out to 0 first"
            elif got > want:
                msg += ": too large; was out reset to 0 before the sum?"
            else:
                msg += ": too small; do the blocks cover all n elements (cdiv, not //)?"
            fail(ex, case, msg, hint)
        prev = got_arr
    print(f"✓ {ex} passed: {len(calls)} calls (a fresh out, the same out again, an out holding junk), "
          "nothing copied to the host")
