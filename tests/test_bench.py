"""`python -m course bench`: one quick run (the simulator here: a pipeline check, not a measurement)."""
import json
import os
import subprocess
import sys

import pytest

import course
from course.tools import bench

IMPLS = ["course_plain", "course_plain_graph", "course_fused", "course_fused_step", "course_fused_step_graph",
         "course_fused_phases", "numpy", "pytorch_eager", "pytorch_graph"]
RUN = ["course_plain", "course_fused", "course_fused_step", "course_fused_phases", "numpy"]  # run everywhere
GRAPHS = ["course_plain_graph", "course_fused_step_graph", "pytorch_graph"]  # CUDA graphs: a GPU only


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    r = subprocess.run([sys.executable, "-m", "course", "bench", "--quick", "--out", str(out)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ))
    return r, out


@pytest.mark.slow
def test_quick_run_writes_every_row(quick):
    r, out = quick
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert {"gpu", "date", "rows", "config", "quick"} <= set(result) and result["quick"] is True
    assert [row["impl"] for row in result["rows"]] == IMPLS
    for row in result["rows"]:
        assert {"impl", "epoch_s", "test_acc", "launches_per_step", "note"} <= set(row), row
        assert not row.get("failed"), row
    rows = {row["impl"]: row for row in result["rows"]}
    for name in RUN:
        assert rows[name]["epoch_s"] > 0 and 0 <= rows[name]["test_acc"] <= 1, rows[name]
    assert rows["course_plain"]["launches_per_step"] == bench.PLAIN_LAUNCHES
    assert rows["course_fused"]["launches_per_step"] < rows["course_fused_step"]["launches_per_step"] \
        < rows["course_fused_phases"]["launches_per_step"] < rows["course_plain"]["launches_per_step"]
    # the same initial parameters and permutations: every implementation predicts the same test labels here
    accs = {rows[n]["test_acc"] for n in RUN}
    assert len(accs) == 1, accs
    if course.SIMULATOR:  # no CUDA graphs there: each graph row says so instead of a number
        for name in GRAPHS:
            assert rows[name]["skipped"] and rows[name]["epoch_s"] is None, rows[name]
            assert rows[name]["note"].startswith("skipped: "), rows[name]
        assert "has no CUDA graphs" in rows["course_plain_graph"]["note"] and result["matmul"] == []
    assert "course_fused" in r.stdout and "wrote" in r.stdout


@pytest.mark.slow
def test_torch_row_is_skipped_with_a_note_without_torch(quick):
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here")
    except ImportError:
        pass
    rows = {r["impl"]: r for r in json.loads(quick[1].read_text())["rows"]}
    for name in ("pytorch_eager", "pytorch_graph"):
        assert rows[name]["epoch_s"] is None and rows[name]["skipped"], rows[name]
        assert rows[name]["note"].startswith("skipped: torch is not importable"), rows[name]


def test_out_directory_must_exist(tmp_path):
    r = subprocess.run([sys.executable, "-m", "course", "bench", "--quick", "--out", str(tmp_path / "no" / "f.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_table_marks_scaled_rows():
    text = bench.table([dict(impl="numpy", epoch_s=1.5, test_acc=0.9, launches_per_step=0, scaled=True, note="n"),
                        dict(impl="pytorch_eager", epoch_s=None, test_acc=None, launches_per_step=None, note="s")])
    assert "1500.0ms*" in text and "0.9000" in text and text.splitlines()[2].split()[1:4] == ["-", "-", "-"]


def test_quick_config_is_tiny_in_the_simulator():
    cfg = bench.config(True, True)
    assert cfg["n_train"] <= 32 and cfg["hidden"] <= 16 and cfg["pool"] > 1
    assert bench.config(False, course.SIMULATOR)["hidden"] == 128 and bench.config(False, True)["batch_size"] == 64
