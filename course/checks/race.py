"""Checks for notebook 14's exercise (the time to a target accuracy, from a run's log of evaluations)."""
import numpy as np

from course.checks.core import call, exercise, fail

TARGET = 0.975   # the race's target (course.tools.race.TARGET)
TEST_N = 10_000  # accuracies are counts of the 10,000 test images: k / 10000


def time_to_target_ref(log, target):
    """Training seconds up to and including the first (seconds, accuracy) of log whose accuracy reaches target."""
    clock = 0.0
    for seconds, accuracy in log:
        clock += seconds
        if accuracy >= target:
            return clock
    return None


def _logs(rng):
    """(name, log) cases: noisy rising accuracies of 1 to 33 evaluations, and the edge cases of the rule."""
    def log(acc, secs=None):
        secs = rng.uniform(0.002, 0.02, len(acc)) if secs is None else secs
        return [(float(s), round(float(a) * TEST_N) / TEST_N) for s, a in zip(secs, acc)]
    cases = []
    for n in (2, 7, 16, 33):
        rise = np.linspace(0.90, 0.985, n) + rng.normal(0, 0.004, n)      # noisy: it can dip after reaching
        cases.append((f"a log of {n} evaluations, accuracies rising with noise", log(np.clip(rise, 0, 1))))
    cases += [
        ("a log that reaches exactly the target, then falls below it",
         log([0.95, 0.97, TARGET, 0.974, 0.981])),
        ("a log whose best accuracy comes after its first one at the target",
         log([0.96, 0.976, 0.972, 0.989])),
        ("a log that never reaches the target", log([0.90, 0.95, 0.9749, 0.97])),
        ("a log that reaches the target at its first evaluation", log([0.98, 0.99])),
        ("a log of one evaluation, below the target", log([0.5])),
        ("an empty log (a run that never evaluated)", []),
    ]
    return cases


def _unchanged(ex, case, given, original, hint):
    """Fail if the student's function changed the list it was given."""
    __tracebackhide__ = True
    if given != original:
        fail(ex, case, "the function changed the list it was given", hint)


def _compare(ex, case, got, want, rtol, why_none, what, hint):
    """Fail unless got is None where want is None (why_none: why), else a number within rtol of want (what: what
    that number is; hint: how to get it)."""
    __tracebackhide__ = True
    if want is None:
        if got is not None:
            fail(ex, case, f"expected None, got {got!r}", why_none)
    elif got is None or not isinstance(got, (int, float, np.floating)) or not np.isclose(got, want, rtol=rtol):
        fail(ex, case, f"expected {want!r} {what}, got {got!r}", hint)


@exercise("14.1", nudges=(
    "The clock runs only while the network trains: the answer adds up the seconds of the intervals, in order, up to a point. Which evaluation is that point?",
    "A run stops at the first evaluation that reaches the target, even if a later one is higher; reaching means at least the target. What does a run that never gets there return?",
), more="""\
  clock = 0.0
  for seconds, accuracy in log:       # in the order they happened
      clock += seconds                # this interval's training counts, the evaluation after it does not
      if accuracy >= target:          # the first to reach it: the run stops here
          return clock
  return None                         # never reached""")
def check_time_to_target(time_to_target, seed=0):
    """Exercise 14.1. Domain: logs of 0 to 33 evaluations (accuracies k / 10,000 as the test set gives them) with
    noisy accuracies, at the race's target (0.975) and at others (0.95, 0.9: the target is an argument, not a
    constant), and the rule's edge cases (exactly the target, a better evaluation later, never, at once, an empty
    log); the log left unchanged."""
    ex = "Exercise 14.1"
    rng = np.random.default_rng(seed)
    cases = [(name, log, TARGET) for name, log in _logs(rng)]
    cases += [(f"{name}, target {t}", log, t) for (name, log, _), t in zip(cases[:4], (0.95, 0.9, 0.95, 0.9))]
    for name, log, target in cases:
        given = list(log)
        got = call(ex, f"with {name}", time_to_target, given, target)
        _unchanged(ex, f"with {name}", given, log, "read the log, do not modify it")
        first = next((i for i, (_, a) in enumerate(log) if a >= target), None)
        _compare(ex, f"with {name}", got, time_to_target_ref(log, target), 1e-9,
                 f"no evaluation reaches {target}: a run that never reaches the target has no time to it",
                 f"(the training seconds of evaluations 1 to {(first or 0) + 1}, the first at {target} or more)",
                 "add the seconds of each interval in order, up to and including the first evaluation whose accuracy "
                 "is at least the target; later evaluations do not count")
    return (f"{len(cases)} logs (0 to 33 evaluations: noisy, exactly at the target, a better one later, never, at once; "
            "three targets)")


def recipe_time_ref(times):
    """The median of the seeds' times to the target, or None if any seed missed it (or there are none)."""
    if not times or any(t is None for t in times):
        return None
    return float(np.median(times))


@exercise("14.2", nudges=(
    "A recipe that reached the target with only some of its seeds has not shown that it reaches it: what should its time be then?",
    "With every seed there, the middle of the sorted times is the answer; with an even number of seeds there are two middles.",
), more="""\
  if not times or any(t is None for t in times):   # a seed that missed: the recipe has no time
      return None
  s = sorted(times)
  n = len(s)
  return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2""")
def check_recipe_time(recipe_time, seed=0):
    """Exercise 14.2. Domain: random seeds' times (1 to 7 seeds, odd and even numbers, in random order), some lists
    with a seed that missed, all missing, one seed, none; the list left unchanged (not sorted in place)."""
    ex = "Exercise 14.2"
    rng = np.random.default_rng(seed)
    cases = []
    for n in (1, 2, 3, 4, 5, 6, 7):
        times = [float(t) for t in rng.uniform(0.02, 0.3, n)]
        cases.append((f"{n} seed{'s' if n > 1 else ''} that all reached the target", times))
    for n in (2, 5):
        times = [float(t) for t in rng.uniform(0.02, 0.3, n)]
        times[int(rng.integers(0, n))] = None
        cases.append((f"{n} seeds, one of which missed the target", times))
    cases += [("3 seeds that all missed", [None, None, None]), ("no seeds", [])]
    for name, times in cases:
        given = list(times)
        got = call(ex, f"with {name}", recipe_time, given)
        _unchanged(ex, f"with {name}", given, times, "read the times, do not sort them in place (sorted() makes a "
                   "new list)")
        _compare(ex, f"with {name} ({times})", got, recipe_time_ref(times), 1e-12,
                 "a recipe has a time only when every one of its seeds reached the target", "(the median)",
                 "the median: the middle of the sorted times, or the mean of the two middles for an even number")
    return f"{len(cases)} lists of seeds' times (1 to 7 seeds, odd and even, some missing, none)"
