"""Notebook 13's checks (exercise 13.1, a part's time; 13.2, a grid barrier's time; 13.3, the part to shorten first)
pass the solutions and other
correct answers, reject planted one-line bugs, and say what a wrong answer did."""
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import mutant

import course  # noqa: F401
from course.checks import CheckFailure
from course.checks import epoch as checks
from course.epoch import barrier_us, clock_report, first_to_shorten, part_us


def test_solutions_pass():
    checks.check_part_us(part_us)
    checks.check_barrier_us(barrier_us)
    checks.check_first_to_shorten(first_to_shorten)


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


@pytest.mark.parametrize("check,answer,old,new", [
    ("check_part_us", "part_us", "(T[:, blocks, end] - T[:, blocks, start]).max(axis=1)",
     "T[:, blocks, end].max(axis=1) - T[:, blocks, start].min(axis=1)"),                  # an unnamed wrong rule
    ("check_part_us", "part_us", "np.median(slowest)", "np.median(slowest[1:] if len(slowest) > 1 else slowest)"),
    ("check_barrier_us", "barrier_us", "T[:, :, release].min(axis=1) - T[:, :, arrive].max(axis=1)",
     "T[:, :, arrive].max(axis=1) - T[:, :, release].min(axis=1)"),
])
def test_an_unnamed_wrong_answer_is_not_told_the_rule(check, answer, old, new):
    """13.1 and 13.2 ask which block and which statistic: a failure the check cannot name asks the question back
    (it once printed the rule: 'the largest (end - start) ...; then the median')."""
    with pytest.raises(CheckFailure) as e:
        getattr(checks, check)(mutant(globals()[answer], old, new))
    message = str(e.value).lower()
    assert "median" not in message and "largest" not in message and "earliest release" not in message, message


def test_13_1_and_13_2_specs_ask_rather_than_tell():
    """The student copy's specs of 13.1 and 13.2 pose the question; the rule is the answer."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(
        (Path(__file__).resolve().parents[1] / "notebooks/exercises/13_epoch.ipynb").read_text(encoding="utf-8"))["cells"]}
    for cid in ("e_e1", "e_e2"):
        assert "median" not in cells[cid].lower() and "?" in cells[cid], cells[cid]
    for cid in ("e_e1s", "e_e2s"):   # the stubs keep their docstrings
        assert "median" not in cells[cid].lower() and "slowest" not in cells[cid].lower(), cells[cid]


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

@pytest.mark.parametrize("check, fn, said", [
    pytest.param(checks.check_part_us, mutant(part_us, "slowest = (", "T = T.astype(np.float64); slowest = ("),
                 "float64 readings", id="13.1 float64 before subtracting"),    # 256 ns steps at 1.7e18: 0.77 µs for 0.62
    pytest.param(checks.check_part_us, mutant(part_us, "slowest = (", "T = T.astype(np.float32); slowest = ("),
                 "float32 readings", id="13.1 float32 before subtracting"),    # every difference 0
    pytest.param(checks.check_part_us, mutant(part_us, "slowest = (", "T = T.astype(float); slowest = ("),
                 "float64 readings", id="13.1 Python float before subtracting"),
    pytest.param(checks.check_barrier_us, mutant(barrier_us, "crossing = ", "T = T.astype(np.float64); crossing = "),
                 "float64 readings", id="13.2 float64 before subtracting"),
    pytest.param(checks.check_barrier_us, mutant(barrier_us, "crossing = ", "T = T.astype(np.float32); crossing = "),
                 "float32 readings", id="13.2 float32 before subtracting"),
])
def test_clock_checks_use_raw_globaltimer_values(check, fn, said):
    """A table made float before subtracting fails, and the failure names that cause (issue 51: "expected 0.8640 µs,
    got 0.7680" alone left a student without a clue)."""
    with pytest.raises(CheckFailure, match="Exercise 13") as e:
        check(fn)
    assert said in str(e.value) and "no room for single nanoseconds" in str(e.value), str(e.value)
    assert "astype" not in str(e.value), str(e.value)   # the cause in words, not the fix's code


def test_clock_checks_want_the_float_the_spec_names():
    with pytest.raises(CheckFailure, match="expected a float"):
        checks.check_part_us(mutant(part_us, "float(np.median(slowest)) / 1e3", "np.float32(np.median(slowest) / 1e3)"))
    with pytest.raises(CheckFailure, match="expected a float"):
        checks.check_barrier_us(mutant(barrier_us, "float(np.median(crossing)) / 1e3", "int(np.median(crossing)) // 1000"))


# --- 13.3: the part to shorten first ----------------------------------------------------------------------------

def test_first_to_shorten_written_another_way_passes():
    """Another correct answer: the chain's length with each part taken to zero, worked out in full."""
    from course.epoch import CLOCK_PARTS

    def first_to_shorten_by_chain(report):
        """The step's chain: the longer of the tile blocks' C and A and the spare blocks' part, then rows, barriers."""
        def chain(r):
            side = {"tiles": 0.0, "spare": r.get(next(n for n in CLOCK_PARTS if CLOCK_PARTS[n][2] == "spare"), 0.0)}
            rest = 0.0
            for name, us in r.items():
                who = CLOCK_PARTS[name][2] if name in CLOCK_PARTS else None
                if who == "tiles":
                    side["tiles"] += us
                elif who in ("rows", "barrier"):
                    rest += us
            return max(side.values()) + rest
        whole, best, pick = chain(report), -1.0, None
        spare_name = next(n for n in CLOCK_PARTS if CLOCK_PARTS[n][2] == "spare")
        for name in sorted(n for n in report if n in CLOCK_PARTS):
            shorter = dict(report, **{name: 0.0})
            if CLOCK_PARTS[name][2] == "spare" and name != spare_name:   # a piece of the spare blocks' part
                shorter[spare_name] = report[spare_name] - report[name]
            if whole - chain(shorter) > best + 1e-12:
                best, pick = whole - chain(shorter), name
        return pick
    checks.check_first_to_shorten(first_to_shorten_by_chain)


@pytest.mark.parametrize("old,new,said", [
    ("max(who, key=saved)", "max(who, key=report.get)", "run beside the tile blocks"),        # the largest part
    ("report.get(SPARE_PART, 0.0)", "0.0", "waits for the spare blocks"),                      # spare blocks ignored
    ("max(tiles - us, spare)", "(tiles - us)", "saves only"),                                  # no slack
    ('if who[name] == "spare":', "if name == SPARE_PART:", "run beside the tile blocks"),      # pieces on the path
    ("who = {name: CLOCK_PARTS[name][2] for name in report if name in CLOCK_PARTS}",
     'who = {name: CLOCK_PARTS.get(name, (0, 0, "rows"))[2] for name in report}', "'step' is the whole step"),
    ("return us", 'return us if who[name] == "rows" else 0.0', "every block waits at a grid barrier"),                    # barriers left out
    ("max(who, key=saved)", "min(who, key=saved)", "expected"),
    ("return max(who, key=saved)", "return saved(max(who, key=saved))", "expected a part's name"),
    ("who = {", 'report.pop("step", None); who = {', "changed the report"),
])
def test_first_to_shorten_check_rejects(old, new, said):
    with pytest.raises(CheckFailure, match="Exercise 13.3") as e:
        checks.check_first_to_shorten(mutant(first_to_shorten, old, new))
    assert said in str(e.value), str(e.value)


def test_first_to_shorten_cases_are_the_saved_runs():
    """The check's real reports are fused-h200.json's rows and notebook 13's saved clock report, as they stand."""
    import json
    import re
    from pathlib import Path
    from course.epoch import CLOCK_PARTS
    from course.tools import nbtools
    root = Path(__file__).resolve().parent.parent
    rows = json.loads((root / "notebooks/results/fused-h200.json").read_text(encoding="utf-8"))["versions"]
    for ms, raw in checks.HISTORY_CLOCKS.items():
        row, = [r for r in rows if r["epoch_ms"] == ms and "clocks_us" in r]
        want = dict(row["clocks_us"], **{k: v for k, v in row.get("clocks_us_2", {}).items() if k.startswith("spare_")})
        assert raw == want, ms
        assert set(checks.history_report(raw, list(CLOCK_PARTS))) >= {n for n, p in CLOCK_PARTS.items() if p[2] != "spare"}
    first, = [r for r in rows if "small layer in the 4 blocks without a tile" in r["version"] and "not adopted" in r["version"]]
    assert first["clocks_us"]["spare_small_layer"] == checks.FIRST_SPARE_US
    cell, = [c for c in nbtools.read(root / "notebooks/13_epoch.ipynb")["cells"] if c.get("id") == "ck3"]
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    saved = [float(re.search(re.escape(name) + r"\s+([\d.]+) µs", text).group(1)) for name in list(CLOCK_PARTS) + ["step"]]
    assert saved == checks.NOTEBOOK_CLOCKS
    spare_bound = [ms for ms, raw in checks.HISTORY_CLOCKS.items() if raw.get("spare_small_layer", 0) >
                   sum(v for k, v in raw.items() if k.startswith(("a_", "c_")))]
    assert spare_bound == [12.39]   # the row where the small layer became the path (fused-history.md)
