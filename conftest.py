"""The nbval notebook runs (every cell of notebooks/*.ipynb, `pytest notebooks/`) are slow: `-m "not slow"` leaves
them out. Under pytest-xdist (pyproject.toml: `-n auto --dist loadfile`) the tests of one file share a worker: a
notebook's nbval cells its kernel, a module's tests its module-scoped fixtures (nbgrader's autograde, test_mine's
simulated student), and tests/test_student_notebooks.py's runs to the end their order (the use_mine payoffs of 06,
07 and 13 find the solutions the earlier copies' checks saved in that worker's mine folder, tests/conftest.py).

Here rather than in tests/conftest.py so that it applies to `pytest notebooks/` too."""
import os

import pytest

# Without a GPU the notebooks run their kernels on the CPU executor (course/runtime/cpu.py); in the test suite at the
# simulator's sizes (course.pick), which prove the same in less time than the full sizes a student's run gets.
os.environ.setdefault("COURSE_SIZES", "sim")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # files with a slow test first: no worker starts one last
