"""The nbval notebook runs (every cell of notebooks/*.ipynb, `pytest notebooks/`) are slow: `-m "not slow"` leaves
them out.
Under pytest-xdist (pyproject.toml: `-n auto --dist loadfile`) what must share a process goes to one worker.

Here rather than in tests/conftest.py so that it applies to `pytest notebooks/` too."""
import os

import pytest

# Without a GPU the notebooks run their kernels on the CPU executor (course/cpu.py); in the test suite at the
# simulator's sizes (course.pick), which prove the same in less time than the full sizes a student's run gets.
os.environ.setdefault("COURSE_SIZES", "sim")

# One work unit, run in order on one worker: the student copies run to the end with their solutions
# (tests/test_student_notebooks.py), whose passing checks save the solutions into that worker's mine folder
# (tests/conftest.py), where the later copies' `course.use_mine()` finds them, as a student who did the earlier
# notebooks would have them.
NOTEBOOK_RUNS = "notebook-runs"
PAYOFF_TEST = "test_student_notebook_with_solutions_runs_to_the_end"


def scope(nodeid):
    """The xdist work unit of a test: the notebook runs above, else its file (a notebook's nbval cells share its
    kernel, a module's tests its module-scoped fixtures: nbgrader's autograde, test_mine's simulated student...)."""
    path, _, name = nodeid.partition("::")
    return NOTEBOOK_RUNS if name.startswith(PAYOFF_TEST + "[") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the notebook runs as one unit (xdist's own xdist_group marks need pytest < 9.2)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NotebookRunsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return scope(nodeid)
    return NotebookRunsTogether(config, log)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    # The longest unit first, so that no worker starts it last; then files with a slow test, then the rest.
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (scope(item.nodeid) != NOTEBOOK_RUNS, item.path not in slow))
