"""Simulator timings are labelled meaningless wherever a notebook prints or plots one, through course.timing."""
import re

import pytest

import course
from course import timing
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
    assert "timing.label(" in src or "timing.sim_note()" in src, f"{name} {cid}: a printed time without the label"


def test_no_notebook_types_its_own_simulator_label():
    for name, cid, src in cells():
        assert "timings meaningless" not in src and "(simulator: meaningless)" not in src, (name, cid)
