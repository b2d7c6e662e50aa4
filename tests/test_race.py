"""`python -m course race` and `course.tools.scaling`: the rules of the race, a quick run, the committed results."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import course
import course.runtime.timing

from course.tools import race, scaling

RESULTS = Path(__file__).resolve().parent.parent / "notebooks" / "results"
RACE_JSON = min(p.name for p in RESULTS.glob("race-*.json"))    # one race, named after its GPU


def test_linear_schedule_falls_to_zero_over_its_epochs():
    r = race.Recipe("course_fused", 64, 0.4, "linear-2", 0.0)
    rates = [race.rate(r, k) for k in range(2 * race.EVALS_PER_EPOCH)]
    assert rates == sorted(rates, reverse=True) and rates[0] < 0.4 and 0 < rates[-1] < 0.4 / race.EVALS_PER_EPOCH
    assert race.epochs_of("linear-2") == 2 and race.epochs_of("const") == race.MAX_EPOCHS
    assert race.rate(r._replace(schedule="const"), 7) == 0.4


@pytest.mark.parametrize("steps", [937, 234, 29, 3, 1])
def test_intervals_cover_the_epoch_once(steps):
    iv = race.intervals(steps)
    assert iv[0][0] == 0 and iv[-1][1] == steps and all(a < b for a, b in iv)
    assert all(b == c for (_, b), (c, _) in zip(iv, iv[1:])) and len(iv) == min(steps, race.EVALS_PER_EPOCH)


def test_the_clock_stops_at_the_first_point_at_the_target(monkeypatch):
    """A run's clock is notebook 14's time_to_target over the intervals of its cumulative points."""
    from course.tools.race import Recipe
    points = [(0.1, 0.9), (0.2, 0.975), (0.3, 0.99)]
    monkeypatch.setitem(race.RUNNERS, "course_fused", lambda data, recipe, seed, quick: iter(points))
    r = Recipe("course_fused", 64, 0.1, "const", 0.0)
    secs, epochs, best, stopped = race.run_to_target({"course": None}, r, 0, 0.975)
    assert math.isclose(secs, 0.2) and epochs == 2 / race.EVALS_PER_EPOCH and best == 0.975 and not stopped
    assert race.run_to_target({"course": None}, r, 0, 0.975, limit=0.05)[::3] == (None, True)   # past the limit
    points[1:] = [(0.2, 0.97)]                      # never at the target
    assert race.run_to_target({"course": None}, r, 0, 0.975)[0] is None
    assert race.time_to_target is __import__("course.race").race.time_to_target


def test_onecycle_rises_then_falls_to_zero():
    r = race.Recipe("pytorch_graph", 1024, 0.32, "onecycle-2", 0.9, True)
    rates = [race.rate(r, k) for k in range(2 * race.EVALS_PER_EPOCH)]
    top = rates.index(max(rates))
    assert 0 < rates[0] < rates[top] <= 0.32 and top > 0 and rates[top:] == sorted(rates[top:], reverse=True)
    assert 0 < rates[-1] < 0.32 / 4 and race.epochs_of("onecycle-2") == 2


def test_both_sides_get_the_same_sweep():
    grid = race.sweep_grid()
    by = {impl: [r for r in grid if r.impl == impl] for impl in ("course_fused", "pytorch_graph")}
    assert {r.schedule for r in by["course_fused"]} <= set(race.SCHEDULES)
    assert {"const", "linear-3", "onecycle-3"} <= {r.schedule for r in by["pytorch_graph"]}
    assert {r.batch_size for r in by["pytorch_graph"]} == {32 * 2 ** k for k in range(8)}      # 32 .. 4096
    assert {race.optimizer(r) for r in by["pytorch_graph"]} == {"sgd", "heavy-ball", "nesterov"}
    assert {race.optimizer(r) for r in by["course_fused"]} == {"sgd", "heavy-ball", "nesterov"}  # the fused kernel's
    assert {r.batch_size for r in by["course_fused"]} == {32 * 2 ** k for k in range(8)}
    assert set(by["course_fused"]) == {r._replace(impl="course_fused") for r in by["pytorch_graph"]}
    assert race.BATCH_LIMITS["course_fused"] == race.BATCH_LIMITS["pytorch_graph"]


def _row(impl, b, lr, t, schedule="const", momentum=0.0, nesterov=False):
    return race.row(race.Recipe(impl, b, lr, schedule, momentum, nesterov), "sweep", [(t, 2.0, 0.98)])


def test_a_best_at_the_edge_of_the_rates_says_edge_and_widens():
    """A synthetic grid whose fastest recipe has the largest rate tried: 'edge', and the next step doubles it."""
    rows = [_row("pytorch_graph", b, lr, abs(math.log2(b / 256)) + 0.1 / lr) for b in (128, 256, 512) for lr in (0.1, 0.2, 0.4)]
    best = race.fastest(rows, "pytorch_graph")
    assert (best["batch_size"], best["lr"]) == (256, 0.4)
    v = race.verdict(rows, best)
    assert v["rate"] == "edge" and v["batch"] == "interior" and v["rate_neighbours"][1] is None
    new = race.widen(rows, best)
    assert race.Recipe("pytorch_graph", 256, 0.8, "const", 0.0) in new
    assert race.Recipe("pytorch_graph", 256, 0.2, "const", 0.0) not in new                    # tried already
    rows.append(_row("pytorch_graph", 256, 0.8, 1.0))                                          # doubled: slower
    v = race.verdict(rows, race.fastest(rows, "pytorch_graph"))
    assert v["rate"] == "interior" and "lr 0.8" in v["rate_neighbours"][1]


def test_a_best_at_the_largest_batch_tried_widens_the_batch_or_is_the_largest_supported(monkeypatch):
    rows = [_row("pytorch_graph", b, 0.4, 1.0 / b) for b in (1024, 2048, 4096)]
    rows += [_row("pytorch_graph", 4096, lr, 1.0) for lr in (0.2, 0.8)]
    best = race.fastest(rows, "pytorch_graph")
    v = race.verdict(rows, best)
    assert best["batch_size"] == 4096 and v["batch"] == "edge" and v["rate"] == "interior"
    assert {r.batch_size for r in race.widen(rows, best)} == {4096, 8192}                      # twice the batch
    monkeypatch.setitem(race.BATCH_LIMITS, "course_fused", (8, 64))                        # a side that stops at 64
    course = [_row("course_fused", b, 0.4, 1.0 / b) for b in (16, 32, 64)]
    v = race.verdict(course, race.fastest(course, "course_fused"))
    assert v["batch"] == "largest supported" and "batch 32" in v["batch_neighbours"][0]
    assert all(r.batch_size <= 64 for r in race.widen(course, race.fastest(course, "course_fused")))
    faster = course + [_row("course_fused", 32, 0.8, 1e-3)]                                  # a neighbour wins
    assert race.verdict(faster, course[-1])["batch"] == "beaten"


def _fake_runner(data, recipe, seed, quick=False):
    """A synthetic side: an interval costs less at larger batches, but takes more intervals away from batch 256
    (the course: 64) and rate 0.3 (0.03 with momentum; the schedules one more); every point is cumulative."""
    best_b = 64 if recipe.impl == "course_fused" else 256
    best_lr = 0.03 if recipe.momentum else 0.3
    n = 4 + round(4 * abs(math.log2(recipe.lr / best_lr))) + round(3 * abs(math.log2(recipe.batch_size / best_b)))
    n += recipe.schedule != "const"
    dt = 1e-3 * (1 + best_b / recipe.batch_size) * (1 + 0.01 * seed)
    for k in range(race.epochs_of(recipe.schedule) * race.EVALS_PER_EPOCH):
        yield (k + 1) * dt, 0.98 if k + 1 >= n else 0.9


def test_the_search_widens_until_both_optima_are_interior(monkeypatch):
    """The whole race on synthetic sides: the coarse grid misses both optima's rates; the rounds find them."""
    for impl in race.RUNNERS:
        monkeypatch.setitem(race.RUNNERS, impl, _fake_runner)
    rows, summary = race.race({"course": 1, "pytorch": 1}, seeds=3, log=lambda s: None, rounds=race.ROUNDS)
    ours, theirs = race.best(rows, "course_"), race.best(rows, "pytorch_")
    assert (ours["batch_size"], ours["schedule"]) == (64, "const") and len(ours["seeds"]) == 3
    assert (theirs["batch_size"], theirs["schedule"]) == (256, "const")
    assert abs(math.log2(ours["lr"] / 0.3)) <= 0.5 and min(abs(math.log2(theirs["lr"] / x)) for x in (0.3, 0.03)) <= 0.5
    assert summary["pytorch_graph"]["rate"] == summary["pytorch_graph"]["batch"] == "interior"
    assert summary["course_fused"]["rate"] == "interior"
    assert summary["course_fused"]["batch"] == "interior"
    assert all(s["rounds"] > 0 for s in summary.values())
    assert {r["stage"] for r in rows} == {"sweep", "final", "neighbour"}
    assert any(r.get("stopped") for r in rows)                      # slow recipes cut short
    assert "interior" in "\n".join(race.table(summary))


def test_the_final_tries_a_rate_the_search_never_tried_beside_its_best(monkeypatch):
    """A regression (race-h100.json, 2026-12-07): the search's runner-up at another schedule won the final, its rate
    had no neighbour above in the search, and the verdict said "edge". settle now tries a factor sqrt(2) there."""
    monkeypatch.setitem(race.RUNNERS, "course_fused", _fake_runner)
    sweep = [_row("course_fused", 64, 0.15, 0.02, "const"), _row("course_fused", 64, 0.3, 0.01, "linear-2"),
             _row("course_fused", 64, 0.15, 0.01, "linear-2"), _row("course_fused", 32, 0.3, 0.05, "linear-2"),
             _row("course_fused", 128, 0.3, 0.05, "linear-2"), _row("course_fused", 64, 0.6, 0.05, "const")]
    rows = race.settle({"course": 1}, "course_fused", sweep, race.TARGET, 2, False, lambda s: None)
    best = race.fastest(rows, "course_fused")
    assert (best["batch_size"], best["lr"], best["schedule"]) == (64, 0.3, "linear-2")
    assert race.verdict(rows, best)["rate"] == "interior", race.verdict(rows, best)
    assert any(r["lr"] == race._lr(0.3 * 2 ** 0.5) and r["stage"] == "neighbour" for r in rows)
    assert race.missing_rates(rows, best) == []


def test_a_row_has_the_median_only_when_every_seed_got_there():
    r = race.Recipe("course_fused", 64, 0.4, "const", 0.0)
    assert race.row(r, "final", [(0.03, 2.5, 0.976), (0.01, 2.0, 0.977), (0.02, 2.25, 0.98)])["seconds_to_target"] == 0.02
    missed = race.row(r, "final", [(0.03, 2.5, 0.976), (None, 8, 0.97)])
    assert missed["seconds_to_target"] is None and missed["epochs_to_target"] == [2.5, None]


def test_the_floor_counts_what_notebook_08_counts():
    from course.perf import epoch_cost
    assert scaling.flops_per_epoch(60000) == epoch_cost(60000, 784, 128, 10, 64)[0]


@pytest.mark.slow
def test_quick_race_writes_its_rows(tmp_path):
    out = tmp_path / "race.json"
    r = subprocess.run([sys.executable, "-m", "course", "race", "--quick", "--target", "0", "--seeds", "2",
                        "--out", str(out)], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["quick"] is True and res["target"] == 0 and res["evals_per_epoch"] == race.EVALS_PER_EPOCH
    stages = [(row["stage"], row["impl"]) for row in res["rows"]]
    assert ("sweep", "course_fused") in stages and ("final", "course_fused") in stages, stages
    final = next(row for row in res["rows"] if row["stage"] == "final")
    assert len(final["seeds"]) == 2 and all(s > 0 for s in final["seeds"]) and final["seconds_to_target"] > 0
    assert set(race.Recipe._fields) <= set(final)


def test_the_committed_race_is_a_fair_one():
    """The committed race: the target, each side searched with one seed, finals over five seeds."""
    res = json.loads((RESULTS / RACE_JSON).read_text())
    card = RACE_JSON.removeprefix("race-").removesuffix(".json").upper()
    assert res["target"] == 0.975 and not res["quick"] and res["seeds"] == 5 and card in res["gpu"]
    rows = res["rows"]
    for r in rows:
        assert r["impl"].startswith(("course_", "pytorch_")) and set(race.Recipe._fields[:5]) <= set(r)
        assert {"seconds_to_target", "seeds"} <= set(r)
    sweep = {r["impl"]: 0 for r in rows}
    for r in rows:
        if r["stage"] == "sweep":
            sweep[r["impl"]] += 1
            assert len(r["seeds"]) == 1
    assert sweep["pytorch_graph"] > 0 and sweep["course_fused"] > 0
    if "search" in res:   # PyTorch tuned as hard as the course: the same coarse grid, searched until it stopped on
        s = res["search"]  # its own (not by its budget, unless the course's was too), its optimum interior
        assert res["grid"]["coarse"]["pytorch_graph"] == res["grid"]["coarse"]["course_fused"]
        assert not s["pytorch_graph"]["stopped_by_budget"] or s["course_fused"]["stopped_by_budget"]
        assert s["pytorch_graph"]["rate"] == s["pytorch_graph"]["batch"] == "interior"
    else:
        assert sweep["pytorch_graph"] >= sweep["course_fused"]
    finals = [r for r in rows if r["stage"] in ("final", "neighbour")]
    assert {"course_fused", "pytorch_graph", "pytorch_compile", "pytorch_eager"} <= {r["impl"] for r in finals}
    assert all(len(r["seeds"]) == 5 for r in finals)
    assert race.best(rows, "course_") and race.best(rows, "pytorch_")


def test_the_committed_race_records_its_grid_and_verdicts(monkeypatch):
    """The grid searched and each side's verdict are in the JSON, and the verdict is what its rows say (with the
    batch sizes each side supported when it ran, which the JSON records)."""
    res = json.loads((RESULTS / RACE_JSON).read_text())
    if "search" not in res:
        pytest.skip(f"{RACE_JSON} predates the interior search: run `python -m course race` on a GPU")
    monkeypatch.setattr(race, "BATCH_LIMITS", {k: tuple(v) for k, v in res["grid"]["batch_limits"].items()})
    finals = [r for r in res["rows"] if r["stage"] in ("final", "neighbour")]
    assert set(res["grid"]["coarse"]) == {"course_fused", "pytorch_graph"} and res["graph_modes"]
    for impl, s in res["search"].items():
        side = [r for r in finals if r["impl"] == impl]
        b = race.fastest(side, impl)
        assert race.verdict(side, b) == {k: s[k] for k in ("rate", "batch", "rate_neighbours", "batch_neighbours")}


def test_the_committed_sweep_covers_every_batch():
    res = json.loads((RESULTS / min(p.name for p in RESULTS.glob("scaling-*.json"))).read_text())
    got = {(r["impl"], r["batch_size"]) for r in res["rows"] if r["epoch_s"]}
    for impl in ("course_plain", "course_plain_graph", "pytorch_eager", "pytorch_graph"):
        assert {(impl, b) for b in scaling.BATCHES} <= got, impl
    assert {("course_fused", 32), ("course_fused", 64)} <= got
    assert res["floor_s"] == pytest.approx(res["flops_per_epoch"] / (scaling.FP32_PEAK_TFLOPS * 1e12))


@pytest.mark.skipif(not course.SIMULATOR, reason="the labels are for times off the GPU")
def test_quick_scaling_off_the_gpu_labels_its_times_and_the_gpu_s_floor(monkeypatch, capsys):
    """A regression: CPU times printed unlabelled beside an H200's floor."""
    monkeypatch.setattr(scaling, "measure", lambda data, cfg, init, b, impls: {"course_plain": 0.0024,
                                                                               "pytorch_graph": None})
    assert scaling.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    timed = [line for line in lines if line.startswith("batch") and " ms" in line]
    assert len(timed) == 2 and all(line.endswith(f"({course.runtime.timing._note()})") for line in timed), lines
    (floor,) = [line for line in lines if line.startswith("compute floor")]
    assert "at the FP32 peak of 67 TFLOP/s = " in floor and floor.endswith("not comparable with the times above")
