"""Checks for notebook 03's exercises (the stable softmax row, the block reduction, the mean on the device).

The simulator runs GPU threads one at a time (a thread runs until it ends or waits at `cuda.syncthreads()`, and
the blocks of a grid run one after another), which hides the two classic reduction bugs: a missing
`syncthreads` and a missing atomic. The reduction check makes both visible there anyway: while the kernel runs
it fills every new shared (and local) array with NaN, so a cell read before any thread wrote it turns the sum
into NaN, and it counts the atomic adds (one per block). On a GPU, where it cannot do either, it scans the
kernel's code for an atomic and adds a case with thousands of blocks, where a race shows in the total."""
import contextlib
from types import SimpleNamespace

import numpy as np

import course
from course.runtime.device import in_kernel_thread
from course.checks.core import (MAX_THREADS, ON_THIS_DEVICE, CheckFailure, CheckSignal, _sticky, code_names,
                                divergent_barriers, exercise, fail, on_a_gpu, padded_input, padded_output,
                                run_cases, run_sampled, simulator_eyes)
from course.runtime.util import cdiv


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
    """Random logits: N(0, 3), or (large) uniform in [-100, 100] with every third row moved below -150 and in
    every fifth row the LAST logit leading the others by 90 to 120 (a max that skips it overflows exp)."""
    if not large:
        return (rng.standard_normal((B, C)) * 3).astype(np.float32)
    z = rng.uniform(-100, 100, (B, C))  # a max above 88.7 makes exp overflow float32 (about 4 rows in 10)
    z[::3] -= 250.0                     # every exp of these rows underflows to 0 unless the max is subtracted
    z[1::5, -1] = z[1::5, :-1].max(axis=1) + rng.uniform(90, 120, len(z[1::5]))
    return z.astype(np.float32)


@exercise("3.1", nudges=(
    "One thread per row, in three passes over it: the row's maximum (over every column), the sum of the "
    "exponentials of the logits minus that maximum, then each probability. Why does subtracting the maximum "
    "keep exp from overflowing?",
    "For the loss of the label: why not the log of its probability (for a confidently wrong row it underflows "
    "to 0, and its log is -inf)? Write it from the log of the sum and the label's logit. Every constant "
    "float32.",
), more="""\
  r = cuda.grid(1)
  if r < logits.shape[0]:
      m = logits[r, 0]; then m = max(m, logits[r, c]) for c in range(1, C)   # every column, the last included
      s = sum over c of math.exp(logits[r, c] - m)
      probs[r, c] = math.exp(logits[r, c] - m) / s for every c
      losses[r] = math.log(s) - (logits[r, y[r]] - m)      # never -log(probs[r, y[r]]): it can underflow to 0""")
def check_softmax_xent_kernel(softmax_xent_kernel, seed=0):
    """Exercise 3.1: one thread per row writes probs (B, C) and losses (B,); moderate logits, then ones near ±100
    (some rows far below 0, some whose last logit leads by more than exp can take).

    Domain: logits N(0, 3) and uniform in ±100 (rows below -150, a last logit leading by 90 to 120: exp
    overflows or underflows without the max), rows whose logits all tie; C of 3 to 13 (the course's 10); int32
    and int64 labels; B from 9 to 300 rows (past twice the notebook's batch of 64; in the simulator only the
    first and last blocks of that case run) and 60,001 on a GPU; blocks 8 to 1024 (1024 on a GPU only)."""
    ex = "Exercise 3.1"
    rng = np.random.default_rng(seed)
    specs = {False: [(37, 10, 32, np.int64), (50, 7, 16, np.int32), *on_a_gpu((41, 10, MAX_THREADS, np.int64)),
                     (64, 10, 32, np.int64)],
             True: [(9, 13, 8, np.int64),  # the smallest: what a GPU also runs in the simulator (C = 13 > 10)
                    (45, 10, 64, np.int64), (course.pick(60_001, 29), 13, course.pick(128, 8), np.int32),
                    *on_a_gpu((23, 13, MAX_THREADS, np.int64)),
                    (course.pick(60_000 // 64 * 64, 32), 10, course.pick(64, 16), np.int64)]}  # whole blocks
    cases = {}
    for large, shapes in specs.items():
        cases[large] = []
        for B, C, block, itype in shapes:
            z = _logits(rng, B, C, large)
            y = rng.integers(0, C, B).astype(itype)
            losses, probs = _softmax_xent_rows64(z, y)
            what = "near ±100, every third row below -150, every fifth led by its last logit" if large else "N(0, 3)"
            cases[large].append(dict(name=f"logits ({B}, {C}) {what}, {np.dtype(itype)} labels",
                                     grid=cdiv(B, block), block=block, inputs=[z, y],
                                     expected=(probs.astype(np.float32), losses.astype(np.float32))))
    # float32 throughout: probs within 1e-5 (they are in [0, 1]); losses up to ~350 within a relative 1e-5
    tol = dict(atol=1e-5, rtol=1e-5)
    hints = {False: "look at the row this thread owns (its guard), at whether all C probabilities of the row are "
                    "written, and at the loss of the row's label",
             True: "look at the max (it must start from a logit of the row, not 0, and cover every column, the "
                   "last one included) and at how the loss is computed: from log(s) and the label's logit, not "
                   "from a probability that can underflow to 0"}
    for large in (False, True):
        which = "logits near ±100" if large else "moderate logits"
        try:
            run_cases(ex, softmax_xent_kernel, cases[large], hint=hints[large], **tol)
        except CheckFailure as e:
            msg = str(e)
            if course.SIMULATOR and any(f"raised {k}" in msg for k in ("ValueError", "OverflowError",
                                                                          "ZeroDivisionError")):
                # the simulator computes math.log and math.exp in Python, which raise where a GPU returns inf/NaN
                fail(ex, f"with {which}", msg.splitlines()[1].strip() + ". Python's math.log(0) raises where a "
                     "GPU returns -inf, so your kernel took the log of 0 (a sum of exps that underflowed) or an "
                     "exp overflowed: on a GPU this row's loss would be inf or NaN", hints[True])
            if not large:
                raise
            raise CheckFailure(f"{msg}\n  Your kernel passed the cases with moderate logits. With logits near "
                               "±100 a NaN or inf means exp overflowed (exp(89) is inf in float32) or a whole "
                               "row underflowed to 0 (0 / 0 is NaN), not that the element was skipped.") from None
    z = (rng.standard_normal((300, 3)) * 3).astype(np.float32)  # a batch past twice the notebook's 64 rows
    z[::7] = z[::7, :1]                                           # every 7th row: all its logits tie
    y = rng.integers(0, 3, 300)
    losses, probs = _softmax_xent_rows64(z, y)
    grid = cdiv(300, 32)
    run_sampled(ex, softmax_xent_kernel, [dict(
        name="logits (300, 3) N(0, 3), every 7th row tied, int64 labels", grid=grid, block=32, inputs=[z, y],
        expected=(probs.astype(np.float32), losses.astype(np.float32)), thread_axes=(0,),
        keep=lambda b: b[0] in (0, grid - 1))], hints[False] + " (every row, whatever the batch size)", **tol)
    blocks = sorted({c["block"] for group in cases.values() for c in group})
    return (f"{sum(map(len, cases.values())) + 1} random cases (half of them with logits near ±100, one of 300 "
            f"rows), blocks {', '.join(map(str, blocks))}")


MAX_BLOCK = 1024  # the largest block 3.2's spec allows (notebook 03's MAX_BLOCK): its check launches one

# --- instruments for the simulator -----------------------------------------------------------------------

def _poison(a):
    """Fill a fresh array with NaN (floats) or a large sentinel (integers), so that reading it unwritten shows."""
    if a.dtype.kind == "f":
        a.fill(np.nan)
    elif a.dtype.kind in "iu":
        a.fill(np.iinfo(a.dtype).max // 3)
    return a


@contextlib.contextmanager
def simulator_instruments(active=None):
    """While a kernel runs in the simulator: new shared and local arrays hold NaN, atomic adds are counted, the
    barriers each thread reaches are recorded, and so are the sizes of shared arrays.

    Yields an object whose `atomic_adds` list gets one entry per `cuda.atomic.add`, `barriers` maps
    (blockIdx, threadIdx) to the source lines of the `cuda.syncthreads()` calls that thread reached, in order, and
    `shared_sizes` lists (cells, source line) per shared array. Inactive (`active` False: on a GPU, unless the
    kernel runs in the simulator there, core.simulator_eyes) it does nothing (the lists stay empty). The
    simulator allocates shared memory with numpy.empty, which often returns memory that happens to hold
    plausible values; NaN makes a read-before-write show.

    It also makes the simulator's shared-array allocation thread-safe: the simulator looks the array up and
    creates it without a lock, and inside a Jupyter kernel two threads of a block sometimes both create it (each
    then works on its own copy), which would fail a correct kernel here."""
    active = course.SIMULATOR if active is None else active  # True: a simulated kernel on a GPU machine too
    stats = SimpleNamespace(atomic_adds=[], active=active, barriers={}, shared_sizes=[])
    if not active:
        yield stats
        return
    from course.runtime.device import instruments  # the simulator's internals are patched there, and only there
    with instruments(fill=_poison, atomic_add=stats.atomic_adds.append,  # list.append is atomic under the GIL
                     shared=lambda a, line: stats.shared_sizes.append((a.size, line)),
                     barrier=lambda b, t, line: stats.barriers.setdefault((b, t), []).append(line)):
        yield stats


def barrier_mismatch(barriers, block):
    """(block, thread a, its barriers, thread b, its barriers) for the first block (of `block` threads, 1-D) whose
    threads did not all reach the same cuda.syncthreads() calls in the same order (a thread that returned before
    any barrier reached none); None if every block agrees."""
    by_block = {}
    for (blk, thr), lines in sorted(barriers.items()):
        by_block.setdefault(blk, {})[thr] = lines
    for blk, threads in by_block.items():
        seqs = [((t, 0, 0), threads.get((t, 0, 0), [])) for t in range(block)]
        for thr, lines in seqs[1:]:
            if lines != seqs[0][1]:
                return blk, seqs[0][0], seqs[0][1], thr, lines
    return None


def _short(lines):
    return ", ".join(f"line {n}" for n in lines[:6]) + (", ..." if len(lines) > 6 else "") if lines else "none"


@exercise("3.2", nudges=(
    "Each block sums its part of x in shared memory: every thread first stores one element (and past the end "
    "of x, a value that changes no sum), then a tree halves the number of cells still to combine.",
    "Between a write of shared memory and the reads of it: a barrier that EVERY thread of the block reaches "
    "(so not inside an if that depends on the thread). With a block that is not a power of two, how is an odd "
    "count halved? Blocks cannot wait for each other: how does each add its sum into total?",
), more="""\
  s = cuda.shared.array(MAX_BLOCK, np.float32)     # at least one cell per thread of the block
  tid, i = cuda.threadIdx.x, cuda.grid(1)
  s[tid] = x[i] if i < x.size else np.float32(0.0)
  cuda.syncthreads()
  step = cuda.blockDim.x
  while step > 1:
      half = (step + 1) // 2
      if tid + half < step: s[tid] += s[tid + half]
      cuda.syncthreads()                           # OUTSIDE the if: every thread of the block reaches it
      step = half
  if tid == 0: cuda.atomic.add(total, 0, s[0])""")
def check_sum_kernel(sum_kernel, seed=0):
    """Exercise 3.2: total[0] += sum(x), a shared-memory tree per block and one atomic add per block.

    Domain: x positive (a dropped or doubled element always shows) and, in two cases (96 and 300), of both signs
    with exact zeros (the spec allows any float32: a block's sum can be negative or 0); total starting anywhere in
    ±50; n from 5 to 1,000 (1,000,003 and 1,024,000 on a GPU); blocks 8 to 1024, powers of two and not, the last
    block part full or whole."""
    ex = "Exercise 3.2"
    hint = ("look at the load (every cell of the block written, a 0 past the end of x), at the barriers (after "
            "the load and after every tree step, reached by EVERY thread of the block), at how an odd step is "
            "halved, and at how a block's sum reaches total (added atomically, once per block)")
    rng = np.random.default_rng(seed)
    # (n, block): one block; several blocks, the last one part full; blocks that are not powers of two (48,
    # 20); every block full (64 of 32, 96 of 48); the launchers' block of 256; the largest block the spec allows
    # (a shared array sized for less shows); on a GPU thousands of blocks, so that a plain += into total loses
    # additions there
    shapes = [(5, 8), (100, 32), (130, 48), (64, 32), (96, 48), (300, 256), (1000, MAX_BLOCK),
              (course.pick(1_000_003, 75), course.pick(256, 20)), (course.pick(256 * 4000, 60), course.pick(256, 20))]
    cases = []
    for k, (n, block) in enumerate(shapes):
        x = rng.uniform(0.5, 1.5, n).astype(np.float32)  # positive: a dropped or doubled element always shows
        if k in (4, 5):                                   # any float32: both signs, exact zeros
            x = (rng.uniform(-1.5, 1.5, n) * (rng.random(n) > 0.05)).astype(np.float32)
        start = np.float32(rng.uniform(-50, 50))          # total starts here: the kernel adds, it does not set
        cases.append(dict(n=n, block=block, x=x, start=start, grid=cdiv(n, block)))
    for c in cases:
        _sum_case(ex, sum_kernel, c, hint, ON_THIS_DEVICE)
    # on a GPU, the simulator's eyes: the smallest case whose last block is part full, and the largest block
    simulator_eyes(cases, lambda c, on: _sum_case(ex, sum_kernel, c, hint, on), lambda c: c["n"] % c["block"] != 0,
                   instrument=False)
    simulator_eyes(cases, lambda c, on: _sum_case(ex, sum_kernel, c, hint, on), lambda c: c["block"] == MAX_BLOCK,
                   instrument=False)
    lines = divergent_barriers(sum_kernel)
    if lines:
        fail(ex, "(reading the kernel's code)", f"cuda.syncthreads() on line {', '.join(map(str, lines))} is "
             "inside an `if` (or a loop, or after a `return`) that depends on the thread: not every thread of the "
             "block reaches it, which is undefined behaviour on a GPU (a hang, or a sum that is right by luck)",
             hint)
    if "atomic" not in code_names(sum_kernel):  # the kernel's code and every device function it calls
        fail(ex, "(reading the kernel's code)", "sum_kernel never uses cuda.atomic: blocks run at the same time "
             "on a GPU, and a plain total[0] += s[0] loses additions", hint)
    blocks = ", ".join(str(b) for b in sorted({b for _, b in shapes}))
    return (f"{len(shapes)} random cases (sizes that are and are not multiples of the block), blocks {blocks}"
            + (", shared memory NaN-filled, barriers and atomic adds counted" if course.SIMULATOR else ""))


def _sum_case(ex, sum_kernel, c, hint, on):
    """One case of check_sum_kernel, on `on` (this machine, or the simulator on a GPU: core.simulator_eyes)."""
    __tracebackhide__ = True
    n, block, x, start, grid = c["n"], c["block"], c["x"], c["start"], c["grid"]
    guard = max(block, 4)
    total = padded_output((1,), np.float32, guard, on.to_device)
    total.view.copy_to_device(np.array([start], np.float32))
    case = f"{on.where}with n={n}, grid={grid}, block={block} (total starting at {start:.3f})"
    xs = padded_input(x, guard, on.to_device)
    with simulator_instruments(active=course.SIMULATOR or on is not ON_THIS_DEVICE) as stats:
        on.launch(ex, case, sum_kernel, grid, block, [xs.view, total.view], hint)
    xs.unchanged(ex, case, "x", hint)
    small = [(size, line) for size, line in stats.shared_sizes if size < block]
    if small:
        fail(ex, case, f"the shared array of line {small[0][1]} has {small[0][0]} cells for a block of {block} "
             "threads: on a GPU the threads past its end write into memory that is not theirs", hint)
    odd = barrier_mismatch(stats.barriers, block)
    if odd:
        blk, ta, la, tb, lb = odd
        fail(ex, case, f"in block {blk[0]}, thread {ta[0]} reached the barriers ({_short(la)}) and thread "
             f"{tb[0]} reached ({_short(lb)}): every thread of a block must reach the same "
             "cuda.syncthreads() calls. A barrier inside an `if` that depends on the thread (or a return "
             "before one) is undefined behaviour on a GPU: a hang or a wrong sum", hint)
    got, want = float(total.guards(ex, case, hint)[0]), float(start) + float(x.astype(np.float64).sum())
    if not abs(got - want) <= _sum_tolerance(x, start):
        fail(ex, case, _sum_diagnosis(got, want, start, x, block, grid, stats.active), hint)
    if stats.active and len(stats.atomic_adds) != grid:
        if not stats.atomic_adds:
            fail(ex, case, "the total is right here, but only because the simulator runs the blocks one after "
                 "another: your kernel made no atomic add, and on a GPU blocks that update total[0] with a "
                 "plain += at the same time lose each other's additions", hint)
        fail(ex, case, f"{len(stats.atomic_adds)} atomic adds for {grid} block{'s' * (grid > 1)}: reduce each "
             "block in shared memory first, then let one thread per block add the block's sum", hint)


def _sum_tolerance(x, start=0.0):
    """How far a right total may lie from start + sum(x) in float64: a tree of float32 additions is off by about
    log2(n) ulps of the magnitudes summed, atomic adds of the blocks' sums by a few more; 1e-5 of them allows it."""
    return 1e-5 * (abs(float(start)) + float(np.abs(x.astype(np.float64)).sum()))


def _sum_diagnosis(got, want, start, x, block, grid, nan_filled):
    """What a wrong total (got, where start + sum(x) = want) says about the kernel. `nan_filled`: shared memory
    started as NaN (the simulator's instruments); on a GPU it holds whatever an earlier block or kernel left."""
    diff = got - want
    positive = bool((x > 0).all())  # the diagnoses below count elements of a positive x
    partial = x.size % block != 0   # the last block has threads past the end of x, whose cells must hold 0
    blocks = [x[b * block:(b + 1) * block] for b in range(grid)]
    msg = f"total[0] should be {want:.5f} (start + sum(x)) but is {got:.5f}"
    unwritten = (" Or the shared cells of threads past the end of x did not hold 0: each must store 0 there (on a "
                 "GPU a cell no thread writes holds whatever an earlier block or kernel left, not 0)") if partial else ""
    if np.isnan(got):
        if nan_filled:
            return msg + (". NaN: a tree step read a shared cell that no thread had written yet (the check fills "
                          "shared memory with NaN): a cuda.syncthreads() is missing after the load or after a "
                          "step, or threads past the end of x did not store 0")
        return msg + (". NaN: a tree step read a shared cell that held no number (on a GPU a cell no thread wrote "
                      "holds whatever was there before): a cuda.syncthreads() missing after the load or after a "
                      "step, or threads past the end of x that did not store 0")
    if not positive:
        return msg + (": x has values of both signs and zeros here (the spec allows any float32): is every value "
                      "added, whatever its sign, and every block's sum, negative too?" + unwritten)
    # overwritten: the total is exactly one block's float32 sum (the last to write wins), or the sum of every
    # block without the start value, each within float32's rounding of it
    if (any(abs(got - b.astype(np.float64).sum()) <= _sum_tolerance(b) for b in blocks)
            or abs(got - (want - float(start))) <= _sum_tolerance(x, start)):
        return msg + (". That is one block's sum, or the sum without the starting value: total[0] was "
                      "overwritten (=) instead of added to (cuda.atomic.add)")
    if diff < 0:
        msg += (f": short by {-diff:.4f}, about {-diff / x.mean():.1f} elements' worth, so some cells never "
                "reached s[0]. Is a cuda.syncthreads() missing after a tree step (a thread then reads its "
                "partner's cell before the partner has added into it)?")
        if block & (block - 1):
            msg += (f" Or, with this block of {block} threads (not a power of two), does half round down "
                    "(step // 2)? That drops the last cell of every odd step: round up.")
        return msg + unwritten
    return msg + f": {diff:.4f} too much, about {diff / x.mean():.1f} elements' worth: some counted twice?" + unwritten


# --- Exercise 3.3: a launcher, checked by calling it ----------------------------------------------------

class _HostCopy(CheckSignal):
    """A copy between host and device (or an allocation) that the spec rules out: its message says which."""


def _device_array_classes():
    """(the class that defines copy_to_host, the one that defines __setitem__) of a device array: on a GPU the
    first is DeviceNDArrayBase and the second its subclass DeviceNDArray; in the simulator both are one class."""
    from numba import cuda
    mro = type(cuda.device_array(1, np.float32)).__mro__
    return (next(c for c in mro if "copy_to_host" in vars(c)), next(c for c in mro if "__setitem__" in vars(c)))


@contextlib.contextmanager
def no_host_copies(*, to_host=True, to_device=True, allocations=False):
    """While the block runs, copies between host and device (and, if asked, new device allocations) raise
    _HostCopy(what): the student's code must keep its work on the device, in the arrays it was given."""
    from numba import cuda
    cls, setitem = _device_array_classes()  # setitem: a[...] = host values is a copy too
    saved_cls = {k: vars(cls)[k] for k in ("copy_to_host", "copy_to_device") if k in vars(cls)}
    saved_set = vars(setitem)["__setitem__"]
    mod_names = (["to_device"] if to_device else []) + \
        (["device_array", "device_array_like", "to_device", "pinned_array", "mapped_array"] if allocations else [])
    saved_mod = {k: getattr(cuda, k) for k in set(mod_names) if hasattr(cuda, k)}

    def refuse(what):
        def f(*args, **kwargs):
            raise _HostCopy(what)
        return f

    if to_host:
        cls.copy_to_host = refuse("copied an array to the host (copy_to_host)")
    if to_device:
        cls.copy_to_device = refuse("copied an array from the host to the device (copy_to_device)")
        host_set = refuse("copied values from the host to the device (an assignment out[...] = ...)")

        def guarded_set(self, key, value):  # in the simulator kernels index device arrays too: let them
            if in_kernel_thread():
                return saved_set(self, key, value)
            return host_set(self, key, value)
        setitem.__setitem__ = guarded_set
    for k in saved_mod:
        setattr(cuda, k, refuse("copied an array from the host to the device (cuda.to_device)" if k == "to_device"
                                else f"allocated a new device array (cuda.{k})"))
    try:
        yield
    finally:
        for k, f in saved_cls.items():
            setattr(cls, k, f)
        setitem.__setitem__ = saved_set
        for k, f in saved_mod.items():
            setattr(cuda, k, f)


@contextlib.contextmanager
def recorded_copies():
    """While the block runs, every copy_to_host of a device array appends that array's element count to the
    yielded list (the copy still happens): a check can see what a function brought back to the host."""
    cls, _ = _device_array_classes()
    real = vars(cls)["copy_to_host"]
    sizes = []

    def copy_to_host(self, *args, **kwargs):
        sizes.append(int(self.size))
        return real(self, *args, **kwargs)

    cls.copy_to_host = copy_to_host
    try:
        yield sizes
    finally:
        cls.copy_to_host = real


@contextlib.contextmanager
def recorded_launches():
    """While the block runs, every kernel launch appends (kernel name, grid, block, stream) to the yielded list
    (stream 0 when the launch names none)."""
    from numba import cuda

    @cuda.jit
    def _probe(a):
        pass

    cls = type(_probe)
    had = "__getitem__" in vars(cls)
    real = cls.__getitem__
    launches = []

    def getitem(self, config):
        py = getattr(self, "py_func", None)
        cfg = config if isinstance(config, tuple) else (config,)
        launches.append((getattr(py, "__name__", "?"), cfg[0], cfg[1] if len(cfg) > 1 else None,
                         cfg[2] if len(cfg) > 2 else 0))
        return real(self, config)

    cls.__getitem__ = getitem
    try:
        yield launches
    finally:
        if had:
            cls.__getitem__ = real
        else:
            del cls.__getitem__


def _threads(dims):
    dims = dims if isinstance(dims, tuple) else (dims,)
    return int(np.prod([int(d) for d in dims]))


@exercise("3.3", nudges=(
    "Three launches, all on the device: reset out, add the sum of x into it, divide it by n. Which grid and "
    "block does the spec give for the sum (grid first, then block)?",
    "Each call starts from 0, set on the device (no copy from the host), and returns out. Is every launch on "
    "the stream you were given? A mean divides by n, not by n - 1.",
), more="""\
  n = x.shape[0]
  if out is None: out = cuda.device_array(1, np.float32)
  zero_kernel[1, 1, stream](out)                          # reset on the device, on every call
  sum_kernel[cdiv(n, THREADS), THREADS, stream](x, out)   # grid, block, then the stream you were given
  div_kernel[1, 1, stream](out, np.float32(n))
  return out""")
def check_batch_mean(batch_mean, seed=0):
    """Exercise 3.3: batch_mean(x, out=None, stream=0) leaves mean(x) in out (1,) on the device, on every call,
    with sum_kernel launched on cdiv(n, THREADS) blocks of THREADS threads, every launch on the stream given, and
    no copy between host and device.

    Domain: 4 calls in one process, with different data each time (two x of the same length, one with a negative
    mean), n = 37 and 100,003 (300 in the simulator), out None, the out a call returned, and an out holding junk;
    the default stream and a stream of its own. Types: a (1,) float32 device array, returned."""
    from numba import cuda

    from course.loss import THREADS
    ex = "Exercise 3.3"
    hint = ("look at how out is reset (a kernel on the device, every call), at the launch of sum_kernel (grid "
            "first: how many blocks of THREADS threads cover n elements), at the division by n, and at what is "
            "returned; no copy between host and device")
    rng = np.random.default_rng(seed)
    n_big = course.pick(100_003, 300)
    x37 = rng.uniform(0.5, 1.5, 37).astype(np.float32)
    x37b = rng.uniform(-1.5, 0.5, 37).astype(np.float32)  # another x of that length, its mean negative
    xbig = rng.uniform(0.5, 1.5, n_big).astype(np.float32)
    junk = cuda.to_device(np.array([rng.uniform(500, 1000)], np.float32))  # an `out` that holds an old value
    junk_value = float(junk.copy_to_host()[0])
    stream = cuda.stream()  # notebook 08 (08_time) records batch_mean's launches into a CUDA graph through this argument
    calls = [("n=37, out=None", x37, None, None), ("n=37 again, into the out the first call returned", x37, "prev",
                                                   None),
             (f"n={n_big}, into an out that holds {junk_value:.2f}", xbig, junk, None),
             ("another x of n=37 (negative mean), out=None, on a stream of its own (stream=...)", x37b, None,
              stream)]
    prev, blocks_seen = None, set()
    for what, x, out, on in calls:
        case = f"with {what}"
        x_d = cuda.to_device(x)
        out = prev if isinstance(out, str) else out  # "prev": the out the first call returned
        before = junk_value if out is junk else float(prev.copy_to_host()[0]) if out is not None else 0.0
        try:
            with no_host_copies(), recorded_launches() as launches:
                if on is not None:
                    got_arr = batch_mean(x_d, stream=on)
                    on.synchronize()
                else:
                    got_arr = batch_mean(x_d) if out is None else batch_mean(x_d, out)
                cuda.synchronize()
        except _HostCopy as e:
            fail(ex, case, f"batch_mean {e}", "keep everything on the device: reset out with a kernel, and "
                 "never copy to the host (that makes Python wait for the GPU); " + hint)
        except CheckFailure:
            raise
        except NotImplementedError:
            raise
        except Exception as e:
            if _sticky(e):
                raise
            fail(ex, case, f"batch_mean raised {type(e).__name__}: {e}", hint)
        if out is not None and got_arr is not out:
            fail(ex, case, "batch_mean did not return the `out` it was given", hint)
        if not hasattr(got_arr, "copy_to_host") or isinstance(got_arr, np.ndarray) \
                or tuple(got_arr.shape) != (1,) or got_arr.dtype != np.float32:
            fail(ex, case, f"expected a (1,) float32 device array, got {type(got_arr).__name__} "
                 f"{getattr(got_arr, 'shape', '')}", hint)
        if on is not None:
            off = [name for name, g, b, st in launches if st is not on]
            if off:
                fail(ex, case, f"{off[0]} was launched on the default stream, not on the stream batch_mean was "
                     f"given ({len(off)} of {len(launches)} launches): launch as kernel[grid, block, stream]",
                     "every launch takes the `stream` argument: a later notebook records them into a CUDA graph "
                     "through it")
        sums = [(_threads(g), _threads(b)) for name, g, b, _ in launches if name == "sum_kernel"]
        n = len(x)
        for g, b in sums:
            if b > 1024:
                fail(ex, case, f"sum_kernel was launched with blocks of {b} threads: a GPU runs at most 1024 "
                     f"threads per block; use blocks of THREADS = {THREADS} and as many blocks as n needs", hint)
            if g != cdiv(n, b):
                fail(ex, case, f"sum_kernel was launched on grid={g} blocks of block={b} threads for n={n}: "
                     f"that should be cdiv(n, block) = {cdiv(n, b)} blocks (in kernel[grid, block] the grid "
                     "comes first)", hint)
            blocks_seen.add(b)
        if len(blocks_seen) > 1:
            fail(ex, case, f"sum_kernel's block size changes with n ({sorted(blocks_seen)} threads): one block "
                 "per array cannot go past 1024 threads; keep the block at THREADS and let the grid grow", hint)
        got = float(got_arr.copy_to_host()[0])
        want = float(x.astype(np.float64).mean())
        if not abs(got - want) <= 1e-5 * float(np.abs(x).mean()):  # float32 sum: error well below 1e-5 of sum|x|
            msg = f"the mean of x is {want:.6f}, out holds {got:.6f}"
            n = len(x)
            if abs(got - want * n) <= 1e-4 * want * n:
                msg += ": that is the sum; divide by n"
            elif n > 1 and abs(got - want * n / (n - 1)) <= 1e-5 * want:
                msg += f": {n}/{n - 1} of the mean: the sum was divided by n - 1, not by n"
            elif before and abs(got - (want + before / n)) <= 1e-4 * (want + abs(before) / n):
                msg += (f": out's old value ({before:.4g}) was added into the sum: reset out to 0 (on the device) "
                        "before the sum, on every call")
            elif before and abs(got - (want + before)) <= 1e-4 * (want + abs(before)):
                msg += f": the mean plus out's old value ({before:.4g}): reset out to 0 first, on every call"
            elif got > want:
                msg += f": {got / want:.4g} times the mean; look at the division (by n) and at where out starts"
            else:
                msg += ": too small; do the blocks cover all n elements (cdiv, not //)?"
            fail(ex, case, msg, hint)
        if not sums:
            fail(ex, case, "the mean is right, but sum_kernel (Exercise 3.2) was never launched", hint)
        prev = got_arr
    return ("4 calls (a fresh out, the same out again, an out holding junk, a stream of its own), sum_kernel "
            "launched on cdiv(n, THREADS) blocks of THREADS on the stream given, nothing copied between host and "
            "device")
