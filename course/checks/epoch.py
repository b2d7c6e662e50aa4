"""Checks for notebook 13's exercises (a part of a step's time and a grid barrier's time, from the epoch kernel's
clocks), on random clock tables: no GPU needed."""
import numpy as np

from course.checks.core import call, exercise, fail

TICK = 32        # ns: %globaltimer's tick on the course's GPU (notebook 13's clocks are multiples of it)
NPOINTS = 16     # clock points per step (course.fused.NPOINTS)
GLOBALTIMER = 1_733_000_000_000_000_000   # ns: a raw %globaltimer reading (Unix time, December 2024), as
# timed_epoch returns it: float64 steps by 256 ns there and float32 by about 1.4e11, so a table converted to float
# before subtracting loses the parts' times


def part_us_ref(T, start, end, blocks):
    """µs between clock points start and end: per step the slowest of `blocks`, then the median over the steps."""
    return float(np.median((T[:, blocks, end] - T[:, blocks, start]).max(axis=1))) / 1e3


def barrier_us_ref(T, arrive, release):
    """µs of a grid barrier: per step the first release minus the last arrival, then the median over the steps."""
    return float(np.median(T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1))) / 1e3


def clock_table(rng, steps, blocks, spread=1.0, start=GLOBALTIMER):
    """Random clocks (steps, blocks, NPOINTS), in ns and multiples of TICK from `start` (by default a raw
    %globaltimer reading, about 1.7e18, as course.fused's timed_epoch returns): every block's points rise within a step,
    some blocks are slower than others, a few steps are much slower than the rest (so a mean and a median differ),
    and the blocks arrive at the barriers (points 4 and 9) at different times and leave them together (points 5,
    10), soon after the last arrival."""
    T = np.zeros((steps, blocks, NPOINTS), np.int64)
    t0 = 0
    for s in range(steps):
        slow = 1.0 + rng.pareto(1.5)                                    # a few steps take far longer
        part = rng.integers(2, 40, (blocks, NPOINTS)) * slow * spread   # ticks of each part, per block
        part *= rng.uniform(0.5, 1.5, (blocks, 1))                      # some blocks are slower than others
        part = np.maximum(1, part.astype(np.int64))
        t = t0 + np.cumsum(part, axis=1)                                 # (blocks, NPOINTS), rising
        for arrive, release in ((4, 5), (9, 10)):                        # the grid barriers: all leave together
            t[:, arrive] = np.maximum(t[:, arrive], t[:, arrive - 1] + 1)
            out = t[:, arrive].max() + rng.integers(3, 30) + rng.integers(0, 3, blocks)
            shift = out - t[:, release]
            t[:, release:] += shift[:, None]
        T[s] = start + t * TICK
        t0 = int(t.max()) + int(rng.integers(1, 20))
    return T


def _tables(rng):
    """(name, T) cases: odd and round numbers of steps and blocks, at raw %globaltimer readings (about 1.7e18 ns,
    as timed_epoch gives them) but for one table that starts at 0."""
    cases = []
    for steps, blocks, start in ((1, 1, GLOBALTIMER), (2, 5, GLOBALTIMER), (7, 33, 0), (24, 132, GLOBALTIMER),
                                 (61, 40, GLOBALTIMER + TICK * 12345), (10, 3, GLOBALTIMER)):
        when = "raw %globaltimer clocks" if start else "clocks from 0"
        cases.append((f"{steps} step{'s' * (steps > 1)} x {blocks} block{'s' * (blocks > 1)} ({when})",
                      clock_table(rng, steps, blocks, start=start)))
    return cases


def _number(ex, case, got, want, wrong, hint):
    """Fail unless got is a number within 1e-9 µs of want; wrong: [(value, what a student did to get it)]."""
    __tracebackhide__ = True
    if not isinstance(got, float):   # a Python float (np.float64 is one); not an int, not a float32's 7 digits
        fail(ex, case, f"expected a float (µs), got {type(got).__name__} {got!r}", "return one float: the median "
             "over the steps, divided by 1e3 (the clocks are in nanoseconds); float(...) makes one")
    if np.isclose(float(got), want, rtol=1e-9, atol=1e-9):
        return
    for value, what in wrong:
        if np.isclose(float(got), value, rtol=1e-9, atol=1e-9):
            fail(ex, case, f"expected {want:.4f} µs, got {float(got):.4f}: that is {what}", hint)
    fail(ex, case, f"expected {want:.4f} µs, got {float(got):.4f}", hint)


@exercise("13.1", nudges=(
    "A step waits for its slowest block, so in each step one block's time stands for the part. Which block, and over which blocks do you look?",
    "First one number per step (the slowest block's time between the two points), then one number for the epoch: the median step, the middle one once they are sorted, not the average, which a few slow steps would pull up. The clocks count nanoseconds.",
), more="""\
  slowest = (T[:, blocks, end] - T[:, blocks, start]).max(axis=1)   # (steps,): the slowest block of each step
  return float(np.median(slowest)) / 1e3                            # the median step, ns -> µs""")
def check_part_us(part_us, seed=0):
    """Exercise 13.1. Domain: random int64 clock tables (1 to 61 steps, 1 to 132 blocks, slow steps and slow
    blocks) at raw %globaltimer readings (about 1.7e18 ns: a table made float before subtracting fails) and one from 0;
    every consecutive pair of clock points and some wider parts; over all the blocks, the first ones and the last
    ones; T left unchanged; a number of µs back."""
    ex = "Exercise 13.1"
    rng = np.random.default_rng(seed)
    n = 0
    for name, T in _tables(rng):
        nb = T.shape[1]
        k = max(1, (2 * nb) // 3)
        sets = [(slice(0, nb), "all the blocks")]
        if nb > 1:
            sets += [(slice(0, k), f"blocks 0 to {k - 1}"), (slice(k, nb), f"blocks {k} to {nb - 1}")]
        for start, end in [(0, 1), (1, 4), (5, 6), (6, 9), (10, 13), (0, 4), (2, 15)]:
            for blocks, who in sets:
                case = f"with {name}, points {start} to {end}, {who}"
                given = T.copy()
                got = call(ex, case, part_us, given, start, end, blocks)
                if not np.array_equal(given, T):
                    fail(ex, case, "your function changed T", "read the clocks, do not write them")
                d = T[:, blocks, end] - T[:, blocks, start]                    # (steps, blocks) ns
                dall = T[:, :, end] - T[:, :, start]
                wrong = [
                    (float(np.median(d.mean(axis=1))) / 1e3, "the median over the steps of the MEAN block, not the slowest"),
                    (float(np.median(d.min(axis=1))) / 1e3, "the fastest block, not the slowest"),
                    (float(np.median(d[:, 0])) / 1e3, "only the first block of `blocks`"),
                    (float(np.mean(d.max(axis=1))) / 1e3, "the MEAN over the steps, not the median"),
                    (float(np.median(d, axis=0).max()) / 1e3, "the median of each block first, then the slowest "
                     "of those: the slowest block must be taken within each step"),
                    (float(np.median(dall.max(axis=1))) / 1e3, "over ALL the blocks, not only `blocks`"),
                    (float(np.median(d.max(axis=1))), "in nanoseconds: the clocks count ns"),
                    (float(np.median(d.max(axis=1))) / 1e6, "in milliseconds"),
                    (-float(np.median(d.max(axis=1))) / 1e3, "negative: end minus start"),
                ]
                _number(ex, case, got, part_us_ref(T, start, end, blocks), wrong,
                        "for each step, the largest (end - start) among `blocks`; then the median of those per-step "
                        "times, in µs")
                n += 1
    return f"{n} parts of 6 random clock tables (1 to 61 steps, 1 to 132 blocks, slow steps and slow blocks)"


@exercise("13.2", nudges=(
    "No block can leave a grid barrier before the last one has arrived. Which block's arrival starts the barrier's own time, and which block's release ends it?",
    "Each block's own wait (its release minus its arrival) also counts the time it waited for slower blocks: that is their lateness, not the barrier. Per step, look across the blocks at each point separately, then take the median over the steps, in µs.",
), more="""\
  crossing = T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)   # (steps,): first out - last in
  return float(np.median(crossing)) / 1e3                                 # the median step, ns -> µs""")
def check_barrier_us(barrier_us, seed=0):
    """Exercise 13.2. Domain: random int64 clock tables (1 to 61 steps, 1 to 132 blocks) at raw %globaltimer
    readings (about 1.7e18 ns) and one from 0, whose blocks arrive at the two barriers at different times and leave
    together; both barriers; T left unchanged; a number of µs back."""
    ex = "Exercise 13.2"
    rng = np.random.default_rng(seed)
    n = 0
    for name, T in _tables(rng):
        for arrive, release in ((4, 5), (9, 10)):
            case = f"with {name}, the barrier from point {arrive} to point {release}"
            given = T.copy()
            got = call(ex, case, barrier_us, given, arrive, release)
            if not np.array_equal(given, T):
                fail(ex, case, "your function changed T", "read the clocks, do not write them")
            a, r = T[:, :, arrive], T[:, :, release]
            wrong = [
                (float(np.median((r - a).max(axis=1))) / 1e3, "the longest wait of a block, which includes its "
                 "wait for the slowest block to arrive"),
                (float(np.median((r - a).mean(axis=1))) / 1e3, "the mean wait of the blocks, which includes "
                 "their waits for the slowest block"),
                (float(np.median((r - a).min(axis=1))) / 1e3, "the shortest wait of a block"),
                (float(np.median(r.max(axis=1) - a.max(axis=1))) / 1e3, "from the last arrival to the LAST release"),
                (float(np.median(r.min(axis=1) - a.min(axis=1))) / 1e3, "from the FIRST arrival to the first release"),
                (float(np.median(r[:, 0] - a[:, 0])) / 1e3, "block 0's wait alone"),
                (float(np.mean(r.min(axis=1) - a.max(axis=1))) / 1e3, "the MEAN over the steps, not the median"),
                (float(np.median(r.min(axis=1) - a.max(axis=1))), "in nanoseconds: the clocks count ns"),
            ]
            _number(ex, case, got, barrier_us_ref(T, arrive, release), wrong,
                    "per step, the earliest release among all the blocks minus the latest arrival among all the "
                    "blocks; then the median over the steps, in µs")
            n += 1
    return f"{n} barriers of 6 random clock tables (1 to 61 steps, 1 to 132 blocks, late blocks)"
