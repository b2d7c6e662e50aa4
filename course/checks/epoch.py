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


def _read_as_floats(T, rule):
    """[(value, what)]: `rule` (a function of T) on T made float64 and float32 BEFORE subtracting, as a student might;
    at raw %globaltimer readings those floats step by 256 ns and 1.4e11 ns, so the parts' times come out wrong."""
    wrong = []
    for dtype in (np.float64, np.float32):
        step = float(np.spacing(dtype(GLOBALTIMER)))
        wrong.append((rule(T.astype(dtype)), f"what {np.dtype(dtype).name} readings give: a clock of ~1.7e18 ns "
                      f"made {np.dtype(dtype).name} before subtracting has no room for single nanoseconds (it steps "
                      f"by {step:.3g} ns there)"))
    return wrong


def _number(ex, case, got, want, wrong, hint):
    """Fail unless got is a number within 1e-9 µs of want; wrong: [(value, what a student did to get it)]."""
    __tracebackhide__ = True
    if not isinstance(got, float):   # a Python float (np.float64 is one); not an int, not a float32's 7 digits
        fail(ex, case, f"expected a float (µs), got {type(got).__name__} {got!r}", "return one float, in µs (the "
             "clocks count nanoseconds); float(...) makes one")
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
                wrong = _read_as_floats(T, lambda F: part_us_ref(F, start, end, blocks)) + [
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
                _number(ex, case, got, part_us_ref(T, start, end, blocks), wrong,   # the rule is the exercise
                        "which block's (end - start) does a step wait for, and which one number of the steps' times "
                        "do a few slow steps not move? hint(\"13.1\") asks it in two steps")
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
            wrong = _read_as_floats(T, lambda F: barrier_us_ref(F, arrive, release)) + [
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
            _number(ex, case, got, barrier_us_ref(T, arrive, release), wrong,   # the rule is the exercise
                    "which block's arrival starts the barrier's own time, and which block's release ends it? "
                    "hint(\"13.2\") asks it in two steps")
            n += 1
    return f"{n} barriers of 6 random clock tables (1 to 61 steps, 1 to 132 blocks, late blocks)"


HISTORY_CLOCKS = {  # notebooks/results/fused-h200.json: each version's clocks_us (the spare blocks' two parts from
    # clocks_us_2 where the row has them), keyed by its epoch_ms; tests/test_checks_epoch.py ties the two
    15.4: {'a_x': 2.75, 'a_sums': 1.34, 'a_atomics': 1.02, 'a_units': 1.63, 'barrier1': 1.5, 'b_h_logits': 1.79, 'b_softmax': 1.41, 'b_dh': 0.29, 'barrier2': 1.25, 'c_dh': 0.77, 'c_sums': 1.7, 'c_w1': 0.93},
    16.17: {'a_x': 0.51, 'a_sums': 1.6, 'a_atomics_and_copies': 3.39, 'a_units': 1.57, 'barrier1': 1.38, 'b_h_logits': 1.82, 'b_softmax': 1.38, 'b_dh': 0.26, 'barrier2': 1.25, 'c_dh': 0.77, 'c_sums': 2.18, 'c_w1': 0.86},
    16.05: {'a_x': 0.48, 'a_sums': 1.73, 'a_atomics': 1.09, 'a_units': 1.7, 'barrier1': 1.31, 'b_h_logits': 2.75, 'b_softmax': 1.76, 'b_dh': 1.18, 'barrier2': 1.38, 'c_dh': 0.83, 'c_sums': 2.14, 'c_w1': 0.86},
    14.38: {'a_x': 2.85, 'a_sums': 1.34, 'a_atomics': 1.12, 'a_units': 1.6, 'barrier1': 0.77, 'b_h_logits': 1.73, 'b_softmax': 1.25, 'b_dh': 0.26, 'barrier2': 0.74, 'c_dh': 0.74, 'c_sums': 2.02, 'c_w1': 0.9},
    13.64: {'a_x': 2.78, 'a_sums': 1.54, 'a_atomics': 1.12, 'a_units': 0.26, 'spare_small_layer': 6.59, 'barrier1': 0.77, 'b_h_logits': 1.89, 'b_softmax': 1.44, 'b_dh': 0.32, 'barrier2': 0.74, 'c_dh': 0.77, 'c_sums': 2.18, 'c_w1': 0.86},
    12.06: {'a_x': 0.32, 'a_sums': 1.47, 'a_atomics': 1.12, 'a_units': 0.16, 'barrier1': 0.74, 'b_h_logits': 1.89, 'b_softmax': 1.44, 'b_dh': 0.32, 'barrier2': 0.74, 'c_dh': 1.09, 'c_sums': 1.89, 'c_copies_issued': 0.96, 'c_w1': 0.51},
    12.22: {'a_x': 0.32, 'a_sums': 1.47, 'a_atomics': 1.38, 'a_units': 0.26, 'spare_small_layer': 6.88, 'barrier1': 0.74, 'b_h_logits': 2.14, 'b_softmax': 1.6, 'b_dh': 0.35, 'barrier2': 0.7, 'c_dh': 0.67, 'c_sums': 2.08, 'c_copies_issued': 0.67, 'c_w1': 0.48},
    12.39: {'a_x': 0.38, 'a_fwd': 2.02, 'a_units': 0.26, 'spare_small_layer': 7.01, 'barrier1': 0.7, 'b_h_logits': 2.18, 'b_softmax': 1.57, 'b_dh': 0.35, 'barrier2': 0.7, 'c_dh': 0.86, 'c_sums': 1.54, 'c_w1': 0.64, 'spare_staged': 3.84, 'spare_sums': 3.14},
    10.89: {'a_x': 0.35, 'a_fwd': 1.98, 'a_units': 0.16, 'spare_small_layer': 2.78, 'spare_staged': 1.38, 'spare_sums': 1.41, 'barrier1': 0.74, 'b_h_logits': 2.21, 'b_softmax': 1.47, 'b_dh': 0.35, 'barrier2': 0.7, 'c_dh': 0.9, 'c_sums': 1.5, 'c_w1': 0.64},
    10.23: {'a_x': 0.32, 'a_fwd': 1.95, 'a_units': 0.13, 'spare_small_layer': 2.56, 'barrier1': 0.77, 'b_h_logits': 1.73, 'b_softmax': 1.44, 'b_dh': 0.26, 'barrier2': 0.74, 'c_dh': 0.7, 'c_sums': 1.25, 'c_w1': 0.61},
    9.91: {'a_x': 0.32, 'a_fwd': 1.76, 'a_units': 0.13, 'spare_small_layer': 2.4, 'barrier1': 0.74, 'b_h_logits': 1.68, 'b_softmax': 1.31, 'b_dh': 0.29, 'barrier2': 0.7, 'c_dh': 0.77, 'c_sums': 1.25, 'c_w1': 0.58},
    9.94: {'a_x': 0.32, 'a_fwd': 1.7, 'a_units': 0.13, 'spare_small_layer': 2.5, 'barrier1': 0.74, 'b_h_logits': 1.82, 'b_softmax': 1.28, 'b_dh': 0.26, 'barrier2': 0.7, 'c_dh': 0.74, 'c_sums': 1.25, 'c_w1': 0.61},
    9.96: {'a_x': 0.35, 'a_fwd': 1.7, 'a_units': 0.13, 'spare_small_layer': 2.3, 'spare_staged': 1.25, 'spare_sums': 1.06, 'barrier1': 0.74, 'b_h_logits': 1.86, 'b_softmax': 1.25, 'b_dh': 0.29, 'barrier2': 0.7, 'c_dh': 0.8, 'c_sums': 1.25, 'c_w1': 0.61},
    10.85: {'a_x': 0.32, 'a_fwd': 1.73, 'a_units': 0.13, 'spare_small_layer': 2.4, 'spare_staged': 1.28, 'spare_sums': 1.12, 'barrier1': 0.74, 'b_h_logits': 1.63, 'b_softmax': 1.12, 'b_dh': 0.29, 'barrier2': 0.74, 'c_dh': 0.96, 'c_sums': 1.15, 'c_w1': 0.61},
    9.64: {'a_x': 0.35, 'a_fwd': 1.63, 'a_units': 0.13, 'spare_small_layer': 2.34, 'spare_staged': 1.28, 'spare_sums': 1.09, 'barrier1': 0.77, 'b_h_logits': 1.7, 'b_softmax': 1.09, 'b_dh': 0.38, 'barrier2': 0.7, 'c_dh': 0.8, 'c_sums': 1.18, 'c_w1': 0.64},
    8.56: {'a_x': 0.35, 'a_fwd': 1.25, 'a_units': 0.13, 'spare_small_layer': 2.3, 'spare_staged': 1.28, 'spare_sums': 1.06, 'barrier1': 0.74, 'b_h_logits': 1.73, 'b_softmax': 1.06, 'b_dh': 0.35, 'barrier2': 0.7, 'c_dh': 0.8, 'c_sums': 1.15, 'c_w1': 0.58},
}
FIRST_SPARE_US = 13.54   # fused-h200.json, "tried, not adopted: the small layer in the 4 blocks without a tile"
NOTEBOOK_CLOCKS = [0.61, 1.76, 0.13, 2.50, 1.34, 1.18, 0.74, 1.89, 1.28, 0.48, 0.74, 0.77, 1.28, 0.64, 10.30]
# ^ notebook 13's saved clock report (cell ck3, an H100): CLOCK_PARTS in order, then "step"
RAW_PARTS = (  # CLOCK_PARTS in order: the keys of fused-h200.json's clocks_us that each part adds up
    ("a_x",), ("a_fwd", "a_sums", "a_atomics", "a_atomics_and_copies"), ("a_units",), ("spare_small_layer",),
    ("spare_staged",), ("spare_sums",), ("barrier1",), ("b_h_logits",), ("b_softmax",), ("b_dh",), ("barrier2",),
    ("c_dh",), ("c_sums",), ("c_w1", "c_copies_issued"))


def history_report(raw, names):
    """A clock report in CLOCK_PARTS' names (`names`) from a fused-h200.json row's clocks_us: parts it lacks left out."""
    report = {}
    for name, keys in zip(names, RAW_PARTS):
        if any(k in raw for k in keys):
            report[name] = round(sum(raw.get(k, 0.0) for k in keys), 2)
    return report


def savings_ref(report, parts):
    """{part: µs the step would lose if that part took none}: the tile blocks' parts (phase C, then the next step's
    A) run beside the spare blocks' part (which their two other parts split), so that stretch lasts the longer of
    the two; every other part (a batch row's, a barrier) is on the path. parts: CLOCK_PARTS."""
    who = {name: parts[name][2] for name in report if name in parts}
    tiles = sum(us for name, us in report.items() if who.get(name) == "tiles")
    spare = max((us for name, us in report.items() if who.get(name) == "spare"), default=0.0)  # the whole part
    out = {}
    for name, kind in who.items():
        us = report[name]
        if kind == "tiles":
            out[name] = max(tiles, spare) - max(tiles - us, spare)
        elif kind == "spare":
            out[name] = max(tiles, spare) - max(tiles, spare - us)
        else:
            out[name] = us
    return out


def _random_report(rng, names, parts, kind):
    """A random clock report: every part 0.05 to 4 µs, then shaped by `kind` ("no spare": the spare blocks' parts
    left out; "spare hidden", "spare bound": their part shorter or longer than the tile blocks' beside it; "slack":
    one tile part longer than the spare blocks' slack; "barrier": a grid barrier the longest part); "step" their
    chain, or left out (one step)."""
    report = {name: round(float(rng.uniform(0.05, 4.0)), 2) for name in names}
    spare = [n for n in names if parts[n][2] == "spare"]
    total, subparts = spare[0], spare[1:]
    tiles = sum(report[n] for n in names if parts[n][2] == "tiles")
    if kind == "slack":   # one tile part longer than every other part, and than the spare blocks' slack
        big = rng.choice([n for n in names if parts[n][2] == "tiles"])
        report[big] = round(max(report.values()) + float(rng.uniform(0.5, 2.0)), 2)
        tiles = sum(report[n] for n in names if parts[n][2] == "tiles")
    if kind == "no spare":
        for n in spare:
            del report[n]
    else:
        share = {"spare hidden": (0.3, 0.9), "spare bound": (1.15, 2.5), "slack": (0.75, 0.95),
                 "barrier": (0.2, 0.9)}[kind]
        report[total] = round(float(rng.uniform(*share)) * tiles, 2)
        report[subparts[0]] = round(report[total] * float(rng.uniform(0.2, 0.8)), 2)
        report[subparts[1]] = round(report[total] - report[subparts[0]], 2)
    if kind == "barrier":
        report[rng.choice([n for n in names if parts[n][2] == "barrier"])] = round(float(rng.uniform(5, 12)), 2)
    if rng.random() < 0.8:
        tiles = sum(us for n, us in report.items() if parts[n][2] == "tiles")
        chain = max(tiles, report.get(total, 0.0)) + sum(us for n, us in report.items() if parts[n][2] in
                                                          ("rows", "barrier"))
        report["step"] = round(chain + float(rng.uniform(0, 0.5)), 2)   # the chain, and a little between parts
    order = list(report)
    rng.shuffle(order)
    return {n: report[n] for n in order}


def _reports(rng):
    """(what, report) cases: this notebook's saved report, the kernel's history, its first spare blocks, random."""
    from course.epoch import CLOCK_PARTS
    names = list(CLOCK_PARTS)
    cases = [("notebook 13's saved report (an H100)", dict(zip(names + ["step"], NOTEBOOK_CLOCKS)))]
    for ms, raw in HISTORY_CLOCKS.items():
        cases.append((f"the {ms} ms kernel's report (fused-h200.json)", history_report(raw, names)))
    first = history_report(HISTORY_CLOCKS[13.64], names)
    first[names[3]] = FIRST_SPARE_US
    cases.append((f"the 13.64 ms kernel with the spare blocks' first try ({FIRST_SPARE_US} µs, fused-h200.json)",
                  first))
    for kind in ("no spare", "spare hidden", "spare bound", "slack", "barrier"):
        for k in range(4):
            cases.append((f"a random report ({kind}, {k + 1})", _random_report(rng, names, CLOCK_PARTS, kind)))
    return cases, CLOCK_PARTS


def _why(name, saved, report, parts):
    """Why `name` saves only `saved` µs, in the check's words."""
    kind = parts[name][2] if name in parts else None
    tiles = sum(us for n, us in report.items() if n in parts and parts[n][2] == "tiles")
    spare = max((us for n, us in report.items() if n in parts and parts[n][2] == "spare"), default=0.0)
    if kind == "spare" and saved < report[name] - 1e-9:
        return (f"the spare blocks' {spare:.2f} µs run beside the tile blocks' phases C and A ({tiles:.2f} µs): the "
                f"step waits for the longer, so shortening the spare blocks' part by its {report[name]:.2f} µs saves "
                f"{saved:.2f}")
    if kind == "tiles" and saved < report[name] - 1e-9:
        return (f"the tile blocks' C and A ({tiles:.2f} µs) run beside the spare blocks' {spare:.2f}: taking this "
                f"part's {report[name]:.2f} µs away saves only {saved:.2f}, then the step waits for the spare blocks")
    return f"it saves {saved:.2f} µs"


@exercise("13.3", nudges=(
    "A step waits for a part only if nothing else runs beside it that takes longer. Which parts of the report run at the same time as others, in other blocks?",
    "Between barrier 2 and the next barrier 1 the tile blocks run C then A while the spare blocks run their part: that stretch lasts the longer of the two. For each part, ask how much shorter the step would be if it took no time; the spare blocks' two smaller parts shorten their whole part.",
), more="""\
  who = {name: CLOCK_PARTS[name][2] for name in report if name in CLOCK_PARTS}      # "step" is not a part
  tiles = sum(us for name, us in report.items() if who.get(name) == "tiles")       # phase C, then the next A
  spare = report.get(SPARE_PART, 0.0)                                               # beside them, or none
  def saved(name):                                                                  # µs the step loses
      us = report[name]
      if who[name] == "tiles":
          return max(tiles, spare) - max(tiles - us, spare)
      if who[name] == "spare":
          return max(tiles, spare) - max(tiles, spare - us)
      return us                                                                     # a row's part, a barrier
  return max(who, key=saved)""")
def check_first_to_shorten(first_to_shorten, seed=0):
    """Exercise 13.3. Domain: notebook 13's saved clock report (an H100), the reports of the kernel's history in
    fused-h200.json (without spare blocks, with them beside C and A, and with them the longer: the 12.39 ms row and
    the first spare blocks' 13.54 µs), and random reports (no spare blocks; their part shorter or longer than the
    tile blocks' beside it; a tile part longer than the spare blocks' slack; a grid barrier the longest part), with
    and without "step", in random order; the report left unchanged; a part's name back."""
    ex = "Exercise 13.3"
    rng = np.random.default_rng(seed)
    cases, parts = _reports(rng)
    for what, report in cases:
        case = f"with {what}"
        given = dict(report)
        got = call(ex, case, first_to_shorten, given)
        if given != report or list(given) != list(report):
            fail(ex, case, "your function changed the report", "read the report, do not write it")
        saved = savings_ref(report, parts)
        best = max(saved.values())
        answers = [n for n, s in saved.items() if s >= best - 1e-9]
        if not isinstance(got, str):
            fail(ex, case, f"expected a part's name (a str), got {type(got).__name__} {got!r}",
                 "return the key of the report, not its µs")
        if got == "step":
            fail(ex, case, "'step' is the whole step (one step's start to the next), not one of its parts",
                 "choose among the parts that CLOCK_PARTS names")
        if got not in saved:
            fail(ex, case, f"{got!r} is not a part of this report", "return one of the report's keys")
        if got in answers:
            continue
        hint = ("for each part, how much shorter would the step be if it took no time? The tile blocks' C and A "
                "and the spare blocks' part run side by side")
        if parts[answers[0]][2] == "spare":
            hint = (f"the spare blocks' {max(report[n] for n in answers):.2f} µs are longer than the tile blocks' C and A beside "
                    "them: until they are shorter, the step waits for them at barrier 1")
        if parts[answers[0]][2] == "barrier" and parts[got][2] != "barrier":
            hint = ("every block waits at a grid barrier: the time from the last arrival to the first release is on "
                    "the path like any other part's")
        fail(ex, case, f"expected {' or '.join(map(repr, answers))} (the step {best:.2f} µs shorter); {got!r}: "
             f"{_why(got, saved[got], report, parts)}", hint)
    return f"{len(cases)} clock reports (notebook 13's, the kernel's history, random ones with and without spare blocks)"
