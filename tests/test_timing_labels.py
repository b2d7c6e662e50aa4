"""Simulator timings are labelled meaningless wherever a notebook prints or plots one, through course.runtime.timing."""
import re

import pytest

import course
from course.runtime import timing
from course.tools import nbtools

MEASURES = re.compile(r"perf_counter|gpu_time\(|wall_time\(|time_steps\(|per_call\(")
NOT_YET = set()


def test_label_and_note_in_the_simulator(capsys):
    assert course.SIMULATOR  # CI has no GPU
    assert timing.label("one launch or four") == "one launch or four (simulator: timings meaningless)"
    timing.sim_note()
    assert "simulator: timings meaningless" in capsys.readouterr().out


def test_label_and_note_on_a_gpu_change_nothing(monkeypatch, capsys):
    monkeypatch.setattr(course, "SIMULATOR", False)
    assert timing.label("one launch or four") == "one launch or four"
    timing.sim_note()
    assert capsys.readouterr().out == ""


def cells():
    for path in nbtools.solution_notebooks():
        for cell in nbtools.read(path)["cells"]:
            if cell["cell_type"] == "code":
                yield path.name, cell.get("id"), nbtools.source(cell)


@pytest.mark.parametrize("name, cid, src", [c for c in cells() if MEASURES.search(c[2]) and "print(" in c[2]
                                             and "# NBVAL_CHECK_OUTPUT" not in c[2] and c[:2] not in NOT_YET],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "")
def test_every_printed_timing_goes_through_the_helper(name, cid, src):
    assert "timing.label(" in src or "timing.sim_note()" in src or "timing.on_gpu(" in src, (
        f"{name} {cid}: a printed time without the label")


def test_no_notebook_types_its_own_simulator_label():
    for name, cid, src in cells():
        assert "timings meaningless" not in src and "(simulator: meaningless)" not in src, (name, cid)


def test_on_gpu_off_a_gpu_says_why_in_one_line(capsys):
    assert timing.on_gpu("a 16 × 24 matmul's TFLOP/s say nothing") is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no GPU" in out and "16 × 24" in out and "saved GPU run" in out


def test_on_gpu_on_a_gpu_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(course, "SIMULATOR", False)
    assert timing.on_gpu("anything") is True
    assert capsys.readouterr().out == ""


# what a cell prints that means nothing off a GPU: an epoch scaled from a shrunk network's step,
# TFLOP/s, a step's clock parts, a speed-up, a launch priced against the GPU's epoch, "GPU busy"
MEANINGLESS_OFF_GPU = re.compile(r"per epoch of \d|TFLOP/s|clock_report\(|speed-up|launch per step|GPU busy")


@pytest.mark.parametrize("name, cid, src", [c for c in cells() if MEANINGLESS_OFF_GPU.search(c[2]) and "print(" in c[2]
                                             and c[0][:2] in {"08", "10", "11", "12", "13", "15"}],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "")
def test_figures_that_mean_nothing_off_a_gpu_wait_for_one(name, cid, src):
    """Such a cell prints them on a GPU only: off it, timing.on_gpu says why in one line and points to the saved run."""
    assert "timing.on_gpu(" in src, f"{name} {cid}: prints a figure that means nothing without a GPU"


@pytest.mark.parametrize("name, cid, src", [c for c in cells() if "fit_fused(" in c[2] and "def fit_fused" not in c[2]],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "")
def test_fused_training_prints_its_epochs_on_a_gpu_only(name, cid, src):
    """fit_fused's lines per epoch (milliseconds, test accuracy) off a GPU would time a shrunk run: on a GPU only."""
    assert "progress=progress" in src and "progress = timing.on_gpu(" in src, f"{name} {cid}: epochs printed off a GPU"


def test_on_gpu_off_a_gpu_points_to_the_saved_run_it_is_given(capsys):
    assert timing.on_gpu("16 images", saved="above, under the cell that compares the two runs") is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "saved GPU run's output, above, under the cell that compares" in out, out


@pytest.mark.parametrize("gpu", [False, True])
def test_05_draws_the_h200_bandwidth_line_on_a_gpu_only(gpu, monkeypatch, capsys):
    """05 c028: the 4.8 TB/s line prices an H200's memory; against CPU timings it means nothing, so off a
    GPU the plot leaves it out and one line says why."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    monkeypatch.setattr(course, "SIMULATOR", not gpu)
    monkeypatch.setattr(plt, "show", lambda: None)
    src = next(s for n, cid, s in cells() if n.startswith("05") and cid == "c028")
    sizes = [1_000, 100_000, 10_000_000]
    ns = dict(course=course, timing=timing, np=np, plt=plt, sizes=sizes, step_time={n: 3e-5 for n in sizes},
              times={"the bare launch, no argument checks": 2e-5})
    exec(compile(src, "<05 c028>", "exec"), ns)
    labels = [line.get_label() for line in plt.gca().get_lines()]
    plt.close("all")
    assert ("12 bytes/parameter at 4.8 TB/s" in labels) == gpu, labels
    out = capsys.readouterr().out
    assert (out.count("\n") == 1 and "no GPU" in out) if not gpu else out == "", out
