"""The nbval notebook runs (every cell of notebooks/*.ipynb) are slow: `pytest -m "not slow"` leaves them out.

Here rather than in tests/conftest.py so that it applies to `pytest notebooks/` too."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
