"""On a GPU every check that launches the student's kernel through run_cases must include a block of the most
threads its spec allows (require_largest_block): run here, without a GPU, by making the checks believe they are on
one and stopping each at its run_cases."""
import importlib
import inspect
import pkgutil

import pytest
from conftest import registered_checks

import course
from course.checks import core
from course.runtime.mine import PIECES


class _Stop(Exception):
    pass


def _solution(number, check):
    """The course's answer to a check: its course.runtime.mine piece, else the course function the check is named after."""
    if number in PIECES:
        module, name = PIECES[number][1].split(":")
        return getattr(importlib.import_module(module), name)
    name = check.__name__.removeprefix("check_")
    for info in pkgutil.iter_modules(course.__path__):
        if not info.ispkg and info.name not in ("mine", "cpu"):
            fn = getattr(importlib.import_module(f"course.{info.name}"), name, None)
            if callable(fn):
                return fn
    return None


def _checks():
    """[(exercise number, check module, check)] for each registered check that calls run_cases."""
    found = [(n, m, f) for n, (m, f) in registered_checks().items() if "run_cases(" in inspect.getsource(f.__wrapped__)]
    return sorted(found, key=lambda c: [int(x) for x in c[0].split(".")])


CHECKS = _checks()


def test_the_scan_finds_the_run_cases_checks():
    numbers = {n for n, _, _ in CHECKS}
    assert {"1.2", "2.1", "11.1", "11.2", "12.1", "12.2", "15.1"} <= numbers, sorted(numbers)


@pytest.mark.parametrize("number,mod,check", CHECKS, ids=[n for n, _, _ in CHECKS])
def test_on_a_gpu_every_check_launches_the_largest_block(number, mod, check, monkeypatch):
    solution = _solution(number, check)
    if solution is None:
        pytest.skip(f"no course function answers {check.__name__}")
    reached = []

    def stop_at_run_cases(exercise, kernel, cases, hint, atol=0.0, rtol=0.0, diagnose=None, largest=None):
        reached.append(exercise)
        core.require_largest_block(exercise, cases, largest)   # raises ValueError when no case has that block
        raise _Stop

    monkeypatch.setattr(course, "SIMULATOR", False)   # on_a_gpu(...) cases included, as on a GPU
    monkeypatch.setattr(mod, "run_cases", stop_at_run_cases)
    with pytest.raises(_Stop):
        check.__wrapped__(solution)
    assert reached == [f"Exercise {number}"]
