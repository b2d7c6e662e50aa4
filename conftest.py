"""The nbval notebook runs (every cell of notebooks/*.ipynb) are slow: `pytest -m "not slow"` leaves them out.

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
