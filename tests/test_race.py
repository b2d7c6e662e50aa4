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
    secs, epochs, best = race.run_to_target({"course": None}, r, 0, 0.975)
    assert math.isclose(secs, 0.2) and epochs == 2 / race.EVALS_PER_EPOCH and best == 0.975
    points[1:] = [(0.2, 0.97)]                      # never at the target
    assert race.run_to_target({"course": None}, r, 0, 0.975)[0] is None
    assert race.time_to_target is __import__("course.race").race.time_to_target


def test_both_sides_get_the_same_schedules_and_pytorch_the_wider_sweep():
    grid = race.sweep_grid()
    by = {impl: [r for r in grid if r.impl == impl] for impl in ("course_fused", "pytorch_graph")}
    assert {r.schedule for r in by["course_fused"]} <= {r.schedule for r in by["pytorch_graph"]}
    assert {32, 64} <= {r.batch_size for r in by["pytorch_graph"]} and max(r.batch_size for r in by["pytorch_graph"]) >= 2048
    assert {r.momentum for r in by["pytorch_graph"]} == {0.0, 0.9}
    assert len(by["pytorch_graph"]) > len(by["course_fused"])
    assert max(r.batch_size for r in by["course_fused"]) <= 64    # the fused kernel's MAX_BATCH


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
    """race-h200.json: the target, each side swept with one seed, finals over five seeds, PyTorch's sweep wider."""
    res = json.loads((RESULTS / "race-h200.json").read_text())
    assert res["target"] == 0.975 and not res["quick"] and res["seeds"] == 5 and "H200" in res["gpu"]
    rows = res["rows"]
    for r in rows:
        assert r["impl"].startswith(("course_", "pytorch_")) and set(race.Recipe._fields) <= set(r)
        assert {"seconds_to_target", "seeds"} <= set(r)
    sweep = {r["impl"]: 0 for r in rows}
    for r in rows:
        if r["stage"] == "sweep":
            sweep[r["impl"]] += 1
            assert len(r["seeds"]) == 1
    assert sweep["pytorch_graph"] >= sweep["course_fused"] > 0
    finals = [r for r in rows if r["stage"] == "final"]
    assert {"course_fused", "pytorch_graph", "pytorch_compile", "pytorch_eager"} <= {r["impl"] for r in finals}
    assert all(len(r["seeds"]) == 5 for r in finals)
    ours, theirs = race.best(rows, "course_"), race.best(rows, "pytorch_")
    assert ours and theirs and ours["seconds_to_target"] < theirs["seconds_to_target"]


def test_the_committed_sweep_covers_every_batch():
    res = json.loads((RESULTS / "scaling-h200.json").read_text())
    got = {(r["impl"], r["batch_size"]) for r in res["rows"] if r["epoch_s"]}
    for impl in ("course_plain", "course_plain_graph", "pytorch_eager", "pytorch_graph"):
        assert {(impl, b) for b in scaling.BATCHES} <= got, impl
    assert {("course_fused", 32), ("course_fused", 64)} <= got
    assert res["floor_s"] == pytest.approx(res["flops_per_epoch"] / (res["cublas_tflops"] * 1e12))


@pytest.mark.skipif(not course.SIMULATOR, reason="the labels are for times off the GPU")
def test_quick_scaling_off_the_gpu_labels_its_times_and_the_h200_s_floor(monkeypatch, capsys):
    """A regression: CPU times printed unlabelled beside the H200's cuBLAS floor."""
    monkeypatch.setattr(scaling, "measure", lambda data, cfg, init, b, impls: {"course_plain": 0.0024,
                                                                               "pytorch_graph": None})
    assert scaling.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    timed = [line for line in lines if line.startswith("batch") and " ms" in line]
    assert len(timed) == 2 and all(line.endswith(f"({course.runtime.timing._note()})") for line in timed), lines
    (floor,) = [line for line in lines if line.startswith("compute floor")]
    assert "TFLOP/s on an H200 (bench-h200.json)" in floor and floor.endswith("not comparable with the times above")
