"""What lets the suite run on several cores (pytest-xdist: conftest.py, tests/conftest.py)."""
import os
from pathlib import Path


TESTS = Path(__file__).resolve().parent


def loaded(config, path):
    """The conftest module pytest loaded from `path` (both conftest.py files are modules named `conftest`)."""
    return next(p for p in config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(path))


def test_each_test_process_saves_passes_into_a_mine_folder_of_its_own(pytestconfig):
    own_mine_dir = loaded(pytestconfig, TESTS / "conftest.py").own_mine_dir
    controller = {}
    ours = own_mine_dir(controller, 100)
    worker = dict(controller)                                  # an xdist worker inherits the controller's
    theirs = own_mine_dir(worker, 101)
    assert ours != theirs and os.path.isdir(os.path.dirname(theirs))
    assert own_mine_dir(worker, 101) == theirs                 # the worker keeps its own
    user = {"COURSE_MINE_DIR": "/somewhere/mine"}              # set before pytest: kept, in every process
    assert own_mine_dir(user, 100) == own_mine_dir(user, 101) == "/somewhere/mine"


def test_the_notebook_runs_are_one_unit_and_every_other_test_goes_with_its_file(pytestconfig):
    """xdist's unit of work (conftest.py): the student copies run with their solutions together (the payoff of 06
    finds the solutions the earlier ones saved); any other test with the tests of its file, nbval's cells with
    their notebook's."""
    root = loaded(pytestconfig, TESTS.parent / "conftest.py")
    run = f"tests/test_student_notebooks.py::{root.PAYOFF_TEST}[%s]"
    assert root.scope(run % "01_data.ipynb") == root.scope(run % "06_train.ipynb") == root.NOTEBOOK_RUNS
    assert root.scope("notebooks/01_data.ipynb::Cell 3") == "notebooks/01_data.ipynb"
    assert root.scope("tests/test_student_notebooks.py::test_student_notebook_stops_at_first_exercise[06_train."
                      "ipynb]") == "tests/test_student_notebooks.py"
    assert root.scope("tests/test_mine.py::test_x[a::b]") == "tests/test_mine.py"
