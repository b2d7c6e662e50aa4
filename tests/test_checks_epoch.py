"""Notebook 13's checks (exercise 13.1, a part's time; 13.2, a grid barrier's time) pass the solutions and other
correct answers, reject planted one-line bugs, and say what a wrong answer did."""
import numpy as np
import pytest
from conftest import mutant

import course  # noqa: F401
from course.checks import CheckFailure
from course.checks import epoch as checks
from course.epoch import barrier_us, clock_report, part_us


def test_solutions_pass():
    checks.check_part_us(part_us)
    checks.check_barrier_us(barrier_us)


def test_different_correct_answers_pass():
    def part_us_loop(T, start, end, blocks):
        """A loop over the steps, statistics.median, the blocks as a range."""
        import statistics
        slowest = [max(int(T[s, b, end]) - int(T[s, b, start]) for b in range(T.shape[1])[blocks])
                   for s in range(T.shape[0])]
        return statistics.median(slowest) / 1000

    def barrier_us_sorted(T, arrive, release):
        """np.sort, then the middle by hand; an int64 result divided at the end."""
        crossing = np.sort(np.min(T[..., release], axis=-1) - np.max(T[..., arrive], axis=-1))
        n = len(crossing)
        mid = crossing[n // 2] if n % 2 else (crossing[n // 2 - 1] + crossing[n // 2]) / 2
        return mid / 1e3
    checks.check_part_us(part_us_loop)
    checks.check_barrier_us(barrier_us_sorted)


@pytest.mark.parametrize("old,new,said", [
    (".max(axis=1)", ".mean(axis=1)", "MEAN block"),                                   # the average block
    (".max(axis=1)", ".min(axis=1)", "fastest block"),                                 # the fastest block
    ("np.median(slowest)", "np.mean(slowest)", "MEAN over the steps"),                 # slow steps counted
    ("np.median(slowest)", "np.median(slowest) * 1e3", "nanoseconds"),                 # left in ns
    ("/ 1e3", "/ 1e6", "milliseconds"),                                                # ms
    ("T[:, blocks, end] - T[:, blocks, start]", "T[:, :, end] - T[:, :, start]", "ALL the blocks"),   # blocks ignored
    ("T[:, blocks, end] - T[:, blocks, start]", "T[:, blocks, start] - T[:, blocks, end]", "negative"),
    ("(T[:, blocks, end] - T[:, blocks, start]).max(axis=1)",
     "np.median(T[:, blocks, end] - T[:, blocks, start], axis=0).max(keepdims=True)", "median of each block first"),
    ("(T[:, blocks, end] - T[:, blocks, start]).max(axis=1)",
     "T[:, blocks, end].max(axis=1) - T[:, blocks, start].max(axis=1)", None),         # latest end - latest start
    ("(T[:, blocks, end] - T[:, blocks, start]).max(axis=1)",
     "T[:, blocks, end].max(axis=1) - T[:, blocks, start].min(axis=1)", None),         # latest end - earliest start
    ("np.median(slowest)", "np.median(slowest[1:] if len(slowest) > 1 else slowest)", None),   # a step dropped
])
def test_part_us_check_rejects(old, new, said):
    with pytest.raises(CheckFailure, match="Exercise 13.1") as e:
        checks.check_part_us(mutant(part_us, old, new))
    assert said is None or said in str(e.value), str(e.value)


@pytest.mark.parametrize("old,new,said", [
    ("T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)",
     "(T[:, :, release] - T[:, :, arrive]).max(axis=1)", "longest wait"),             # a block's own wait
    ("T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)",
     "(T[:, :, release] - T[:, :, arrive]).mean(axis=1)", "mean wait"),
    ("T[:, :, release].min(axis=1)", "T[:, :, release].max(axis=1)", "LAST release"),  # to the last release
    ("T[:, :, arrive].max(axis=1)", "T[:, :, arrive].min(axis=1)", "FIRST arrival"),   # from the first arrival
    ("T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)", "T[:, 0, release] - T[:, 0, arrive]",
     "block 0"),
    ("np.median(crossing)", "np.mean(crossing)", "MEAN over the steps"),
    ("/ 1e3", "/ 1", "nanoseconds"),
    ("T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)",
     "T[:, :, arrive].max(axis=1) - T[:, :, release].min(axis=1)", None),              # the sign
])
def test_barrier_us_check_rejects(old, new, said):
    with pytest.raises(CheckFailure, match="Exercise 13.2") as e:
        checks.check_barrier_us(mutant(barrier_us, old, new))
    assert said is None or said in str(e.value), str(e.value)


def test_a_check_refuses_a_function_that_writes_the_clocks():
    def part_us_sorting(T, start, end, blocks):
        """Right value, but makes T's times relative to its first reading, in place."""
        T -= T[0, 0, 0]
        return part_us(T, start, end, blocks)
    with pytest.raises(CheckFailure, match="changed T"):
        checks.check_part_us(part_us_sorting)


def test_clock_report_is_the_two_rules():
    """clock_report: each part by part_us over its blocks, each barrier by barrier_us, after the first 10 steps."""
    from course.epoch import CLOCK_PARTS
    T = checks.clock_table(np.random.default_rng(5), 40, 132)
    report = clock_report(T, 128, 64)
    kept = T[10:-1]
    for name, (a, b, who) in CLOCK_PARTS.items():
        blocks = {"tiles": slice(0, 128), "rows": slice(0, 64), "spare": slice(128, 132)}.get(who)
        want = checks.barrier_us_ref(kept, a, b) if who == "barrier" else checks.part_us_ref(kept, a, b, blocks)
        assert report[name] == pytest.approx(want), name
    assert report["step"] == pytest.approx(np.median(np.diff(kept[:, 0, 0])) / 1e3)
    spare = {k for k, (_, _, who) in CLOCK_PARTS.items() if who == "spare"}
    assert spare and not spare & set(clock_report(T[:, :128], 128, 64))   # no spare blocks: no spare parts
    assert "step" not in clock_report(T[:1], 128, 64)   # one step (the simulator's): no time from it to the next


# --- the clocks the course really gives (raw %globaltimer readings, about 1.7e18 ns) --------------------

@pytest.mark.parametrize("check, fn", [
    pytest.param(checks.check_part_us, mutant(part_us, "slowest = (", "T = T.astype(np.float64); slowest = ("),
                 id="13.1 float64 before subtracting"),    # 256 ns steps at 1.7e18: 0.77 µs for 0.62
    pytest.param(checks.check_part_us, mutant(part_us, "slowest = (", "T = T.astype(np.float32); slowest = ("),
                 id="13.1 float32 before subtracting"),    # every difference 0
    pytest.param(checks.check_barrier_us, mutant(barrier_us, "crossing = ", "T = T.astype(np.float64); crossing = "),
                 id="13.2 float64 before subtracting"),
    pytest.param(checks.check_barrier_us, mutant(barrier_us, "crossing = ", "T = T.astype(np.float32); crossing = "),
                 id="13.2 float32 before subtracting"),
])
def test_clock_checks_use_raw_globaltimer_values(check, fn):
    with pytest.raises(CheckFailure, match="Exercise 13"):
        check(fn)


def test_clock_checks_want_the_float_the_spec_names():
    with pytest.raises(CheckFailure, match="expected a float"):
        checks.check_part_us(mutant(part_us, "float(np.median(slowest)) / 1e3", "np.float32(np.median(slowest) / 1e3)"))
    with pytest.raises(CheckFailure, match="expected a float"):
        checks.check_barrier_us(mutant(barrier_us, "float(np.median(crossing)) / 1e3", "int(np.median(crossing)) // 1000"))
