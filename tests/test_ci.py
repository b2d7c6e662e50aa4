"""What lets the suite run on several cores (pytest-xdist: conftest.py, tests/conftest.py)."""
import os
from pathlib import Path
from types import SimpleNamespace

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


def test_files_with_a_slow_test_come_first_and_keep_their_order(pytestconfig):
    """Root conftest.py: under --dist loadfile a worker takes a whole file; the long ones start first, and a file's
    tests keep their order (the student copies run to the end 01 to 14: the later payoffs use the earlier passes)."""
    root = loaded(pytestconfig, TESTS.parent / "conftest.py")

    def item(path, slow):
        return SimpleNamespace(path=Path(path), slow=slow, get_closest_marker=lambda name: slow or None,
                               add_marker=lambda mark: None)
    items = [item("a.py", False), item("b.py", False), item("b.py", True), item("c.py", False)]
    root.pytest_collection_modifyitems(items)
    assert [(str(i.path), i.slow) for i in items] == [("b.py", False), ("b.py", True), ("a.py", False),
                                                      ("c.py", False)]
