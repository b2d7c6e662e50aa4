"""Notebook 14's check (exercise 14.1, the time to a target accuracy) passes the solution and rejects planted bugs."""
import itertools

import pytest
from conftest import mutant

import course  # noqa: F401
from course.checks import CheckFailure
from course.checks import race as checks
from course.race import recipe_time, time_to_target


def test_solution_passes():
    checks.check_time_to_target(time_to_target)


def test_a_different_correct_answer_passes():
    def time_to_target_accumulate(log, target):
        """The clock as a running sum, then the first evaluation at the target."""
        clocks = itertools.accumulate(s for s, _ in log)
        return next((c for c, (_, a) in zip(clocks, log) if a >= target), None)
    checks.check_time_to_target(time_to_target_accumulate)


@pytest.mark.parametrize("old,new", [
    ("accuracy >= target", "accuracy > target"),                  # exactly the target does not count
    ("return clock", "return seconds"),                           # the last interval, not the total
    ("return None", "return 0.0"),                                # never reached, but a time
    ("return None", "return clock"),                              # never reached: the whole run's time
    ("clock += seconds\n        if accuracy >= target:\n            return clock",
     "if accuracy >= target:\n            return clock\n        clock += seconds"),   # the hit interval left out
    ("clock = 0.0", "clock = 0.0\n    log = sorted(log, key=lambda e: -e[1])"),    # the best evaluation, not the first
    ("clock += seconds", "clock = seconds"),                       # no running sum
])
def test_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 14.1"):
        checks.check_time_to_target(mutant(time_to_target, old, new))


def test_recipe_time_solution_and_a_different_correct_answer_pass():
    import statistics
    checks.check_recipe_time(recipe_time)

    def recipe_time_statistics(times):
        """statistics.median, after the misses are ruled out."""
        return None if not times or None in times else statistics.median(times)
    checks.check_recipe_time(recipe_time_statistics)


MIDDLE = "return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2"


@pytest.mark.parametrize("old,new,cause", [
    ("if not times or any(t is None for t in times):\n        return None",
     "times = [t for t in times if t is not None]\n    if not times:\n        return None",
     "time of its lucky seeds"),                                                           # the misses dropped
    ("        return None", "        return 0.0", "a seed missed the target"),             # a miss as a time
    ("if not times or any(t is None for t in times):", "if not times or all(t is None for t in times):",
     "one of which missed the target"),                      # only all-missed counts: sorting None raises
    ("if not times or", "if", "with no seeds"),                                            # no seeds: s[0] raises
    (MIDDLE, "return s[0]", "lucky seed"),                                                 # the best seed
    (MIDDLE, "return s[-1]", "one slow seed moves it"),                                    # the worst seed
    (MIDDLE, "return sum(s) / n", "one slow seed moves it"),                               # the mean
    (MIDDLE, "return s[n // 2]", "an even count"),                                         # the upper middle
    (MIDDLE, "return s[(n - 1) // 2]", "an even count"),                                   # the lower middle
    ("s = sorted(times)", "s = times", "the middle of the list as given"),                 # not sorted
    ("s = sorted(times)", "times.sort()\n    s = times", "reordered the caller's list"),   # sorted in place
])
def test_recipe_time_check_rejects_and_names_the_cause(old, new, cause):
    with pytest.raises(CheckFailure, match="Exercise 14.2") as e:
        checks.check_recipe_time(mutant(recipe_time, old, new))
    assert cause in str(e.value), str(e.value)


def test_check_rejects_the_race_target_hard_coded():
    """The target is an argument; 0.975 (the race's) written in passes a check that only ever asks for it."""
    with pytest.raises(CheckFailure, match="Exercise 14.1"):
        checks.check_time_to_target(mutant(time_to_target, "accuracy >= target", "accuracy >= 0.975"))


@pytest.mark.parametrize("new", ["return s[0]", "return sum(s) / n", "return s[n // 2]", "return s[1]",
                                 "return min(s) + 1.0"])
def test_recipe_time_failures_do_not_name_the_statistic(new):
    """14.2 asks which statistic a recipe's time is: a failure names the wrong answer's cause, never the answer."""
    with pytest.raises(CheckFailure, match="Exercise 14.2") as e:
        checks.check_recipe_time(mutant(recipe_time, MIDDLE, new))
    assert "median" not in str(e.value).lower(), str(e.value)
