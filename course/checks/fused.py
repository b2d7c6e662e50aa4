"""Checks for the exercises of notebooks 10, 11 and 12: the grid barrier's count (10.2), a block's tile of W1 (11.1),
a warp's sum by shuffles (11.2), one step of a reduce-scatter (12.1), a warp's 16 class sums (12.2)."""
import ast
import inspect
import linecache
import operator
import textwrap
import types

import numpy as np
from numba import cuda, float32

import course

from course.checks.core import (MAX_THREADS, _names, call, code_names, exercise, factor, fail, on_a_gpu, run_cases,
                                simulated)

WARP = 32
SCRATCH = 1024  # the check's kernel: a shared cell per thread for the simulator's shuffles (blocks up to 1024)
COUNTED = 2048  # the counting kernel's scr: SCRATCH cells, then a count per thread (a shape numba-cuda compiles
                # only as a constant: `2 * SCRATCH` ran in the simulator and failed every GPU compile)
ACC = 16        # values per thread in exercise 12.1's check, as phase B's 16 classes


SHUFFLES = ("shfl_xor", "shfl_xor_sync", "shfl_sync", "shfl_up_sync", "shfl_down_sync")


def _parsed(fn):
    """(fn's syntax tree, its first line number), or None when its source cannot be read (a function made by exec of
    a string; a Jupyter cell's can be read)."""
    py = getattr(fn, "py_func", fn)
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(py))), inspect.getsourcelines(py)[1]
    except (OSError, TypeError, SyntaxError):
        return None


def skipped_shuffle(fn, strict=False):
    """The line (in fn's source) of a warp shuffle that only some lanes may reach, or None: one inside an arm of an
    `if`/`else` or a conditional expression whose other arm makes fewer shuffle calls (the lanes there skip it).
    Shuffles in both arms, as many in each, are fine from Volta on (compute capability 7.0: shfl.sync waits for the
    lanes of its mask at any shfl.sync); `strict` (an older GPU, where every lane must reach the same call) flags any
    shuffle in a branch. None also when fn's source cannot be read (_parsed)."""
    parsed = _parsed(fn)
    if parsed is None:
        return None
    tree, first = parsed

    def shuffles(nodes):
        return [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call)
                and (getattr(n.func, "id", None) in SHUFFLES or getattr(n.func, "attr", None) in SHUFFLES)]

    def walk(node):
        if isinstance(node, (ast.If, ast.IfExp)):
            arms = ((node.body, node.orelse) if isinstance(node, ast.If) else ([node.body], [node.orelse]))
            calls = [shuffles(arm) for arm in arms]
            if len(calls[0]) != len(calls[1]) or (strict and calls[0]):
                return first + max(calls, key=len)[0].lineno - 1
        for child in ast.iter_child_nodes(node):
            line = walk(child)
            if line is not None:
                return line
        return None
    return walk(tree)


UNREAD = ("; your function's text could not be read (defined by exec?), so the rule that every lane makes every "
          "shuffle was checked only by running it")


def _before_volta():
    """True on a GPU older than compute capability 7.0 (every lane of a shuffle must reach the same call there)."""
    return not course.SIMULATOR and cuda.get_current_device().compute_capability < (7, 0)


def _every_lane_shuffles(ex, fn):
    """Fail when fn has a shuffle that only some lanes reach (skipped_shuffle); return UNREAD for the pass line when
    fn's source cannot be read (_parsed), else ""."""
    __tracebackhide__ = True
    if _parsed(fn) is None:
        return UNREAD
    strict = _before_volta()
    line = skipped_shuffle(fn, strict)
    if line is not None:
        why = ("on this GPU (before compute capability 7.0) every lane must reach the same shuffle call, so none may "
               "sit inside a branch" if strict else
               "every lane must call shfl_xor in every exchange, and this one sits in an arm of an `if`/`else` (or a "
               "conditional expression) whose other arm makes fewer shuffle calls: the lanes there skip it, so their "
               "partners read a stale value here, and on a GPU wait for a lane that never comes (undefined)")
        fail(ex, "reading your function's code", f"a shuffle that not every lane makes (line {line}): {why}",
             "choose what to send first (a conditional expression can), then call shfl_xor once, outside any "
             "branch, in every lane")
    return ""


def _counting(fn, shfl, depth=0):
    """A copy of device function fn, and of the device functions it calls by name, whose `shfl_xor` (under that name
    or another: course.ptx's function itself) is `shfl`."""
    from course.ptx import shfl_xor
    py = getattr(fn, "py_func", fn)
    names = dict(py.__globals__)
    for name in _names(py.__code__):
        if name == "shfl_xor" or names.get(name) is shfl_xor:
            names[name] = shfl
        elif hasattr(names.get(name), "py_func") and depth < 8:
            names[name] = _counting(names[name], shfl, depth + 1)
    return cuda.jit(device=True)(types.FunctionType(py.__code__, names, py.__name__, py.__defaults__,
                                                    py.__closure__))


def _shfl_counter():
    """shfl_xor that also adds 1 to scr[SCRATCH + threadIdx.x]: the counting kernels' scr has COUNTED cells."""
    from course.ptx import shfl_xor

    @cuda.jit(device=True)
    def counted(scr, v, m):
        t = cuda.threadIdx.x
        scr[SCRATCH + t] += float32(1)
        return shfl_xor(scr, v, m)
    return counted


def _count_kernel(fn, which):
    """A kernel of one warp that calls the student's device fn once per lane (which: 0 warp_sum, 1 halve with half
    8 and mask 16, 2 warp_class_sums), fn's shfl_xor counting into scr, and writes each lane's count into count."""
    if which == 0:
        @cuda.jit(device=True)
        def once(acc, scr):
            fn(scr, acc[0])
    elif which == 1:
        @cuda.jit(device=True)
        def once(acc, scr):
            fn(acc, 8, 16, scr)
    else:
        @cuda.jit(device=True)
        def once(acc, scr):
            fn(acc, scr)

    @cuda.jit
    def kernel(x, count):
        scr = cuda.shared.array(COUNTED, float32)
        acc = cuda.local.array(ACC, float32)
        t = cuda.threadIdx.x
        scr[SCRATCH + t] = float32(0)
        for k in range(ACC):
            acc[k] = x[t, k]
        cuda.syncthreads()
        once(acc, scr)
        count[t] = scr[SCRATCH + t]
    return kernel


def _shuffle_count(fn, which):
    """(shfl_xor calls per lane of one warp in one call of fn, None), or (None, why they could not be counted). The
    same kernel on every machine: on a GPU it compiles and runs there (real shuffles), in the simulator there."""
    x = np.random.default_rng(1).standard_normal((WARP, ACC)).astype(np.float32)
    try:
        with simulated():
            kernel = _count_kernel(_counting(fn, _shfl_counter()), which)
            count = cuda.to_device(np.zeros(WARP, np.float32))
            kernel[1, WARP](cuda.to_device(x), count)
            got = count.copy_to_host()
    except Exception as e:  # the check's correctness run passed: what remains is only the count
        return None, f"the counting run raised {type(e).__name__}"
    if not got.any():
        return None, "no call of course.ptx's shfl_xor (cuda.shfl_xor_sync itself?)"
    return got.astype(int), None


def shuffles_per_lane(fn, which):
    """How many shfl_xor calls each lane of one warp makes in one call of the student's device function fn (which:
    0 warp_sum, 1 halve with half 8, 2 warp_class_sums); None when they cannot be counted (_shuffle_count says why)."""
    return _shuffle_count(fn, which)[0]


def _shuffle_budget(ex, fn, which, spec, hint):
    """Fail unless every lane makes exactly `spec` shuffles in one call of fn (what the spec says). No count is not a
    failure, but the pass line must not claim one: return the note it gets then, else ""."""
    __tracebackhide__ = True
    got, why = _shuffle_count(fn, which)
    if got is None:
        return f"; the shuffles could not be counted ({why}), so the spec's {spec} a lane went unchecked"
    if (got != spec).any():
        lane = int(np.argmax(got != spec))
        fail(ex, "counting the shuffles of one call, in a warp of 32 lanes", f"lane {lane} made {got[lane]} calls "
             f"of shfl_xor, where the spec says {spec}", hint)
    return ""


def _warp_sum_kernel(warp_sum):
    """A kernel that calls the student's device function twice in a row: out[i] = warp_sum(scr,
    x[i]), then out2[i] = warp_sum(scr, 1 - 2 x[i]), for every thread (a sum through scr that a second call
    overwrites too early fails the second)."""
    @cuda.jit
    def kernel(x, out, out2):
        scr = cuda.shared.array(SCRATCH, float32)
        i = cuda.grid(1)
        v = x[i] if i < x.shape[0] else float32(0)   # every lane takes part, past the end with a 0
        s = warp_sum(scr, v)
        s2 = warp_sum(scr, float32(1) - float32(2) * v if i < x.shape[0] else float32(0))
        if i < out.shape[0]:
            out[i] = s
            out2[i] = s2
    return kernel


def warp_sums_ref(x):
    """Each element replaced by the sum of its warp's 32 (zeros past the end)."""
    padded = np.zeros(-(-x.size // WARP) * WARP, np.float64)
    padded[:x.size] = x
    return np.repeat(padded.reshape(-1, WARP).sum(axis=1), WARP)[:x.size].astype(np.float32)


@exercise("11.2", nudges=(
    "A butterfly: after the exchange with mask 16, lanes l and l ^ 16 hold the same sum of two lanes. Which mask next makes every lane's sum cover four lanes, and how many exchanges until it covers all 32?",
    "An exchange takes every lane of the warp at once: each lane must call shfl_xor in every exchange, whatever its value (none skipped behind a condition), or its partner gets nothing meaningful back. Does any lane of yours skip one, and what does each lane do with the value it receives?",
), more="""\
  m = 16
  while m > 0:                      # 16, 8, 4, 2, 1: after the exchange with lane ^ m, every lane holds the sum
      v += shfl_xor(scr, v, m)      # of its group of 2m lanes
      m //= 2
  return v""")
def check_warp_sum(warp_sum, seed=0):
    """Exercise 11.2. Domain: every thread gets its warp's sum, for blocks of 1-4 warps (1,024 threads on a GPU) and
    sizes that are and are not whole warps and blocks (threads past the end with v = 0); values of both signs; two
    calls in a row in one kernel; each lane makes exactly the spec's five shfl_xor calls (counted in a run of one
    warp), none behind a branch (read from the code)."""
    unread = _every_lane_shuffles("Exercise 11.2", warp_sum)
    rng = np.random.default_rng(seed)
    cases = []
    for n, block in ((64, 32), (100, 32), (256, 128), (300, 96), (37, 64), *on_a_gpu((2_100, MAX_THREADS))):
        x = rng.standard_normal(n).astype(np.float32)
        cases.append(dict(name=f"{n} values", grid=-(-n // block), block=block, inputs=[x],
                          expected=(warp_sums_ref(x), warp_sums_ref(np.float32(1) - np.float32(2) * x))))
    what = run_cases("Exercise 11.2", _warp_sum_kernel(warp_sum), cases, atol=1e-5, rtol=1e-5,
                     hint="every lane should return the sum of its warp's 32 lanes, and each exchange should double "
                          "the lanes a lane's sum covers: which lanes does each of yours combine, and does every lane "
                          "end with 32 of them? Every lane must call shfl_xor in every exchange, none skipping one behind an `if` (here the simulator exchanges "
                          "through a shared array, so a lane that skips a call leaves its partner a stale value; on "
                          "a GPU a shuffle that a lane of its mask does not join is undefined); output 2 is a second "
                          "call right after the first: a sum through scr must not be overwritten before every lane "
                          "has read it")
    uncounted = _shuffle_budget("Exercise 11.2", warp_sum, 0, 5, "five exchanges, one shfl_xor each: each doubles "
                                "the lanes a sum covers, so five cover 32")
    return what + unread + uncounted


def _ordinal(n):
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


_ARITHMETIC = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
               operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.iadd: "+=",
               operator.isub: "-=", operator.imul: "*=", operator.itruediv: "/=", operator.ifloordiv: "//=",
               operator.imod: "%="}


def uint64_typing(fn):
    """numba's typing of fn(old, blocks) for uint64 arguments (its CPU typing: the integer rules of the GPU's
    compile): (the return type, the first arithmetic operation that takes a uint64 and gives another type, as a
    phrase, or None). Raises numba's error when it cannot compile fn."""
    import numba
    from numba.core import ir
    d = numba.njit(getattr(fn, "py_func", fn))
    d.compile((numba.uint64, numba.uint64))
    cres = next(iter(d.overloads.values()))
    ann = cres.type_annotation
    body = [inst for _, block in sorted(ann.blocks.items()) for inst in block.body if isinstance(inst, ir.Assign)]
    consts = {inst.target.name: inst.value.value for inst in body if isinstance(inst.value, ir.Const)}
    for inst in body:
        e = inst.value
        if not (isinstance(e, ir.Expr) and e.op in ("binop", "inplace_binop") and e.fn in _ARITHMETIC):
            continue
        got, operands = ann.typemap[inst.target.name], (e.lhs, e.rhs)
        if got == numba.uint64 or numba.uint64 not in [numba.types.unliteral(ann.typemap[v.name]) for v in operands]:
            continue
        names = [f"the literal {consts[v.name]!r} ({numba.types.unliteral(ann.typemap[v.name])})" if v.name in consts
                 else str(numba.types.unliteral(ann.typemap[v.name])) for v in operands]
        code = linecache.getline(e.loc.filename, e.loc.line).strip()
        return cres.signature.return_type, f"`{_ARITHMETIC[e.fn]}` of {names[0]} and {names[1]} gives {got}" + (
            f" in `{code}`" if code else "")
    return cres.signature.return_type, None


def _stays_uint64(ex, barrier_target):
    """Fail unless numba types barrier_target(uint64, uint64) as uint64, naming the operation that leaves it."""
    import numba
    case = "on the GPU, where grid_barrier calls it with uint64 arguments (typed as numba compiles it)"
    hint = ("keep every operation in uint64: combine uint64 only with uint64 (a plain integer literal is a signed "
            "int64: convert it with uint64(...)), and divide with // (integer division), never / (a float)")
    try:
        got, why = uint64_typing(barrier_target)
    except numba.core.errors.NumbaError as e:
        from course.runtime.device import numba_reason
        fail(ex, case, f"numba cannot compile it: {numba_reason(e)['reason'][:300]}",
             "on the GPU your function is compiled: use the integer arithmetic numba compiles (//, +, *, %)")
    if got != numba.uint64:
        floats = "float" in (why or str(got))
        after = ("grid_barrier would then wait on a float64 comparison, exact below 2**53 only" if floats else
                 "grid_barrier would then compare the uint64 count with a signed integer, which numba does in "
                 "float64, exact below 2**53 only")
        fail(ex, case, f"your count is not a uint64 on the GPU: {why or f'it returns {got}'}; {after}", hint)


@exercise("10.2", nudges=(
    "The counter only grows, across barriers and launches. At a barrier every block adds one; the block that arrives last brings it to a multiple of the number of blocks.",
    "From the count a block saw before its own add, which multiple of blocks is the one this barrier ends at? Think of the first block of the second barrier, and of the last block of the first. On the GPU both numbers are uint64: does each of your operations keep that type?",
), more="""\
  # old: what this block's atomic add returned, the count before its own arrival
  return (old // blocks + uint64(1)) * blocks   # the next multiple of blocks above the count this block saw;
                                                # uint64(1): a plain 1 is an int64, and uint64 + int64 is signed""")
def check_barrier_target(barrier_target, seed=0):
    """Exercise 10.2. Domain: grids of 1, 2, 7, 128 and 132 blocks (the course's 132 SMs) meet barrier after
    barrier; the counter starts at a multiple of the grid left by up to 1,000 earlier barriers (it only grows), the
    blocks count in one at a time in a random order (the first and the last arrival included), and each must wait
    for exactly the count at which the last one has arrived; then numba's typing of the function for uint64
    arguments, as grid_barrier compiles it on the GPU: the count must be uint64 (not int64, not a float)."""
    ex = "Exercise 10.2"
    rng = np.random.default_rng(seed)
    for blocks in (1, 2, 7, 128, 132):
        start = blocks * int(rng.integers(0, 1000))      # bar[0] only grows: earlier launches' barriers
        count = start
        for barrier in range(int(rng.integers(3, 7))):
            for arrival, block in enumerate(rng.permutation(blocks)):
                old = count                              # what the atomic add returns to this block
                count += 1
                case = (f"with {blocks} block{'s' if blocks > 1 else ''}, at barrier {barrier + 1} of a launch: "
                        f"block {block} arrived {_ordinal(arrival + 1)} of {blocks} (the count was {old} before "
                        "its add)")
                got = call(ex, case, barrier_target, old, blocks)
                want = start + (barrier + 1) * blocks
                if got is None or int(got) != want:
                    why = ("it returned None: return the count" if got is None else
                           "it would be released before the last block arrived (a race)" if int(got) < want else
                           "it would wait past this barrier's last arrival (a deadlock)")
                    fail(ex, case, f"expected to wait for the count {want}, got {got!r}: {why}",
                         "the count only grows (launch after launch), by one per block at each barrier, so between "
                         "two barriers it is a multiple of blocks. Which multiple have all the blocks of THIS "
                         "barrier reached, given the count one of them saw?")
    _stays_uint64(ex, barrier_target)
    return ("5 grid sizes (1 to 132 blocks), several barriers each, blocks arriving in random orders; a uint64 count "
            "on the GPU")


def _halve_kernel(halve):
    """A kernel that calls the student's device function once: acc = x[i, :16], halve(acc, half, mask, scr), then
    out[i, :half] = acc[:half], for every thread i (past the end of x, acc = 0)."""
    @cuda.jit
    def kernel(x, half, mask, out):
        scr = cuda.shared.array(SCRATCH, float32)
        acc = cuda.local.array(ACC, float32)
        i = cuda.grid(1)
        for k in range(ACC):
            acc[k] = x[i, k] if i < x.shape[0] else float32(0)
        halve(acc, half, mask, scr)
        if i < out.shape[0]:
            for k in range(half):
                out[i, k] = acc[k]
    return kernel



def halve_ref(x, half, mask):
    """One reduce-scatter step in NumPy: thread i (lane l = i % 32) and its partner i ^ mask (same warp) each keep
    the half of acc that bit `mask` of l picks (upper: acc[half:2 half]) and add the other's values of that half."""
    n = x.shape[0]
    acc = np.zeros((-(-n // WARP) * WARP, ACC), np.float64)
    acc[:n] = x
    lanes = np.arange(acc.shape[0])
    partner = lanes ^ mask                                   # the same warp: mask < 32
    upper = (lanes & mask) != 0
    keep = np.where(upper[:, None], acc[:, half:2 * half], acc[:, :half])        # (n, half)
    got = np.where(upper[:, None], acc[partner, half:2 * half], acc[partner, :half])
    return (keep + got)[:n].astype(np.float32)


@exercise("12.1", nudges=(
    "Two partner lanes hold the same classes. After the exchange one of them is responsible for the lower half of those classes and the other for the upper half; which one is decided by a single bit of the lane number.",
    "Each lane must send exactly the half it will not keep, and must add what it receives to the half it keeps. Every lane calls the shuffle the same number of times, once per kept class.",
), more="""\
  upper = (cuda.threadIdx.x & mask) != 0    # this lane keeps acc[half:2 half], its partner acc[:half]
  for k in range(half):
      send = acc[k] if upper else acc[k + half]       # the half this lane drops goes to the partner
      keep = acc[k + half] if upper else acc[k]
      acc[k] = keep + shfl_xor(scr, send, mask)""")
def check_halve(halve, seed=0):
    """Exercise 12.1. Domain: after one halve(acc, half, mask, scr), acc[:half] holds the sums of the kept classes of
    each lane and its partner, for the (half, mask) pairs the fused kernels use, random values of both signs,
    blocks of 1-4 warps (1,024 threads on a GPU) and sizes that are and are not whole blocks; each lane makes
    exactly `half` shfl_xor calls, as the spec says (counted at half 8), none only some lanes reach (read from the
    code)."""
    unread = _every_lane_shuffles("Exercise 12.1", halve)
    rng = np.random.default_rng(seed)
    cases = []
    for (half, mask), n, block in (((8, 16), 64, 32), ((4, 8), 100, 64), ((2, 4), 256, 128), ((1, 2), 300, 96),
                                   ((8, 8), 37, 64), ((4, 4), 160, 32), ((2, 2), 96, 32), ((1, 1), 45, 64),
                                   *on_a_gpu(((8, 16), 2_100, MAX_THREADS))):
        x = rng.standard_normal((n, ACC)).astype(np.float32)
        cases.append(dict(name=f"{n} threads' values, half={half}, mask={mask}", grid=-(-n // block), block=block,
                          unit=(1, block),   # the threads run along the rows of the output (n, half)
                          axes=("thread", "acc index"),
                          inputs=[x, half, mask], expected=halve_ref(x, half, mask)))
    run_cases("Exercise 12.1", _halve_kernel(halve), cases, atol=1e-5, rtol=1e-5,
              hint="look at which half each lane keeps (the lane's bit `mask` set: the upper half), what it sends (the "
                   "half it drops), and that it adds what it receives to what it keeps, for k < half")
    uncounted = _shuffle_budget("Exercise 12.1", halve, 1, 8, "one shfl_xor per kept class, `half` in all (8 "
                                "here): each lane sends only the half it drops")
    threads = [c["inputs"][0].shape[0] for c in cases]
    blocks = ", ".join(sorted({str(c["block"]) for c in cases}))
    return (f"{len(cases)} random cases of 16 values per thread, each (half, mask) pair the kernels use "
            f"({min(threads)} to {max(threads):,} threads, whole warps and not), blocks {blocks}" + unread + uncounted)


def _tile_origin_kernel(tile_origin):
    """A kernel that asks the student's device function where each tile lies: (out_k[t], out_j[t]) =
    tile_origin(t, hidden), one thread per tile."""
    @cuda.jit
    def kernel(hidden, out_k, out_j):
        t = cuda.grid(1)
        if t < out_k.shape[0]:
            k0, j0 = tile_origin(t, hidden)
            out_k[t] = k0
            out_j[t] = j0
    return kernel


def tile_origins_ref(K, hidden):
    """(k0, j0) of every tile of a (K, hidden) W1 cut into TK x TJ tiles, numbered along the hidden units."""
    from course.fused import TJ, TK
    jt = -(-hidden // TJ)                                       # tiles along the hidden units (the last may be narrow)
    t = np.arange(-(-K // TK) * jt)
    return ((t // jt) * TK).astype(np.float32), ((t % jt) * TJ).astype(np.float32)


@exercise("11.1", nudges=(
    "The tiles are numbered along the hidden units first: tile 0 holds inputs 0-99 and units 0-7, tile 1 inputs 0-99 and units 8-15, and so on to the last unit, then the next 100 inputs. How many tiles lie along the hidden units?",
    "When hidden is not a multiple of 8 the last tile of each row is narrower, but it is still a tile: does your count of the tiles along the hidden units include it (which way does your division round)? With that many tiles to a row, which row and which column of tiles is tile t?",
), more="""\
  jt = (hidden + TJ - 1) // TJ      # tiles along the hidden units, the last one maybe narrower
  return (tile // jt) * TK, (tile % jt) * TJ""")
def check_tile_origin(tile_origin, seed=0):
    """Exercise 11.1. Domain: tile_origin(t, hidden) for every tile of W1s of several shapes (the course's 784 x 128,
    hidden a multiple of TJ and not, one tile to 136, 1,260 on a GPU), from blocks of several sizes."""
    rng = np.random.default_rng(seed)
    cases = []
    for K, hidden, block in ((784, 128, 32), (784, 13, 64), (250, 40, 32), (100, 8, 32), (784, 130, 128),
                             (int(rng.integers(101, 700)), int(rng.integers(9, 200)), 96),
                             *on_a_gpu((2_000, 500, MAX_THREADS))):    # 1,260 tiles: a block of 1,024 and a part
        k0, j0 = tile_origins_ref(K, hidden)
        cases.append(dict(name=f"a {K} x {hidden} W1 ({k0.size} tiles)", grid=-(-k0.size // block), block=block,
                          inputs=[hidden], expected=(k0, j0)))
    blocks = ", ".join(sorted({str(c["block"]) for c in cases}))
    tiles = sorted(c["expected"][0].size for c in cases)
    run_cases("Exercise 11.1", _tile_origin_kernel(tile_origin), cases,
                     hint="output 1 is each tile's first input k0, output 2 its first hidden unit j0. The tiles are "
                          "numbered along the hidden units first, and a row's last tile is narrower when hidden is "
                          "not a multiple of TJ: how many tiles does a row hold, and which row and column is tile t?")
    return (f"every tile of {len(cases)} W1 shapes ({tiles[0]} to {tiles[-1]} tiles; hidden a multiple of TJ and "
            f"not), a thread per tile, blocks {blocks}")


def _class_sums_kernel(warp_class_sums):
    """A kernel that calls the student's device function once: acc = x[i, :16], out[i] = warp_class_sums(acc,
    scr), for every thread i (past the end of x, acc = 0)."""
    @cuda.jit
    def kernel(x, out):
        scr = cuda.shared.array(SCRATCH, float32)
        acc = cuda.local.array(ACC, float32)
        i = cuda.grid(1)
        for k in range(ACC):
            acc[k] = x[i, k] if i < x.shape[0] else float32(0)
        s = warp_class_sums(acc, scr)
        if i < out.shape[0]:
            out[i] = s
    return kernel


def class_sums_ref(x):
    """Thread i (lane l = i % 32) gets class l >> 1 of x summed over the 32 threads of its warp (zeros past the end)."""
    n = x.shape[0]
    acc = np.zeros((-(-n // WARP) * WARP, ACC), np.float64)
    acc[:n] = x
    sums = acc.reshape(-1, WARP, ACC).sum(axis=1)                 # (warps, 16): each class over a warp
    lanes = np.arange(acc.shape[0])
    return sums[lanes // WARP, (lanes % WARP) >> 1][:n].astype(np.float32)


def class_sums_mistake(got, expected):
    """Names two typical wrong class sums: one parity's 16 lanes only, and the right sums at the wrong lanes."""
    n = len(got) // 2 * 2
    pairs = got[:n].reshape(-1, 2)                                # (n/2, 2): lanes l and l ^ 1 side by side
    if (not np.allclose(pairs[:, 0], pairs[:, 1], atol=1e-4, rtol=1e-5)
            and np.allclose(pairs.sum(axis=1), expected[:n:2], atol=1e-4, rtol=1e-5)):
        return ("Lanes l and l ^ 1 return different sums that add up to the right one: each is its class over "
                "the 16 lanes of its own parity only; the other parity's 16 are not added")
    whole = len(got) // WARP * WARP
    if whole and np.allclose(np.sort(got[:whole].reshape(-1, WARP), axis=1),
                             np.sort(expected[:whole].reshape(-1, WARP), axis=1), atol=1e-4, rtol=1e-5):
        return ("Each warp returns the right 16 sums, at the wrong lanes: lane l should hold class l >> 1; look at "
                "which half of acc each exchange keeps, and the order of the masks")
    c = factor(got, expected)
    return f"Every value is {c:g} times the right one" if c is not None else None


@exercise("12.2", nudges=(
    "Four calls of your halve take 16 classes to 1 per lane: each keeps half of what the lane holds, and doubles the number of lanes each kept sum covers. Which masks, in which order, leave the two lanes l and l ^ 1 with the same class?",
    "In each halving the lane whose bit `mask` is set keeps the upper half: the first halving picks the class number's highest bit, the last its lowest. Which bit of the lane number must never pick one, for l and l ^ 1 to share class l >> 1? After the four halvings, which lanes has each sum not covered yet?",
), more="""\
  halve(acc, 8, 16, scr)            # 16 classes -> 8, each summed over 2 lanes
  halve(acc, 4, 8, scr)
  halve(acc, 2, 4, scr)
  halve(acc, 1, 2, scr)             # 1 class, summed over the 16 lanes of this lane's parity
  return acc[0] + shfl_xor(scr, acc[0], 1)     # plus the other parity's 16""")
def check_warp_class_sums(warp_class_sums, seed=0):
    """Exercise 12.2. Domain: lanes l and l ^ 1 return class l >> 1 of acc summed over their warp, for random values
    of both signs, blocks of 1-4 warps (1,024 threads on a GPU) and sizes that are and are not whole blocks; each
    lane makes exactly the spec's 16 shfl_xor calls (counted in a run of one warp; warp_sum refused by name), none
    only some lanes reach (read from the code)."""
    unread = _every_lane_shuffles("Exercise 12.2", warp_class_sums)
    if "warp_sum" in code_names(warp_class_sums):
        fail("Exercise 12.2", "reading your function's code", "it calls warp_sum: 5 shuffles a class, 80 for the 16 "
             "classes, where the reduce-scatter takes 16", "four halve calls, then one exchange with lane ^ 1")
    rng = np.random.default_rng(seed)
    cases = []
    for n, block in ((64, 32), (100, 64), (256, 128), (300, 96), (37, 32), *on_a_gpu((2_100, MAX_THREADS))):
        x = rng.standard_normal((n, ACC)).astype(np.float32)
        cases.append(dict(name=f"{n} threads' 16 values", grid=-(-n // block), block=block, inputs=[x],
                          expected=class_sums_ref(x), axes=("thread",)))
    blocks = ", ".join(sorted({str(c["block"]) for c in cases}))
    run_cases("Exercise 12.2", _class_sums_kernel(warp_class_sums), cases, atol=1e-4, rtol=1e-5,
              diagnose=class_sums_mistake,
              hint="thread i should return class (i % 32) >> 1 summed over its warp's 32 threads, the same sum in "
                   "lanes l and l ^ 1: which lanes does each of your exchanges combine, and which class does each "
                   "lane keep?")
    uncounted = _shuffle_budget("Exercise 12.2", warp_class_sums, 2, 16, "four halvings send 8 + 4 + 2 + 1 values "
                                "and the last exchange 1: 16 shuffles, each lane sending only what it drops")
    return (f"{len(cases)} random cases of 16 values per thread ({min(c['inputs'][0].shape[0] for c in cases)} to "
            f"{max(c['inputs'][0].shape[0] for c in cases):,} threads, whole warps and not), blocks {blocks}"
            + unread + uncounted)
