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


NOT_NAMED = ("the recipe's time is one number of the seeds' times that neither its fastest seed nor one slow seed "
             "decides, and that with an even count favours neither of the two seeds in the middle")


def _recipe_cause(times, got):
    """Why `got` is not the recipe's time of `times` (every seed reached the target): the wrong answer's cause, named
    from the value it matches (the best seed, the mean, one of two middles, ...), else None."""
    s, n = sorted(times), len(times)
    near = lambda v: isinstance(got, (int, float, np.floating)) and np.isclose(got, v, rtol=1e-12)  # noqa: E731
    if got is None:
        return "every seed reached the target: the recipe has a time"
    if near(times[n // 2]) or (n % 2 == 0 and near((times[n // 2 - 1] + times[n // 2]) / 2)):
        return "that is the middle of the list as given: the seeds come in any order, the middle is of their times"
    if n % 2 == 0 and (near(s[n // 2 - 1]) or near(s[n // 2])):
        return (f"an even count: {n} seeds have two middle times, {s[n // 2 - 1]!r} and {s[n // 2]!r}, and taking "
                "one of them favours that seed: the recipe's time is halfway between the two")
    if near(s[0]):
        return "that is the fastest seed's time: a lucky seed, not the recipe's"
    if near(s[-1]):
        return "that is the slowest seed's time: one slow seed moves it, however slow it is"
    if near(float(np.mean(times))):
        return "that is the mean: one slow seed moves it (make one seed ten times slower and the mean follows)"
    return None


def _shuffled(rng, times):
    """times as Python floats in a random order whose middle entry (from 5 seeds on) is none of the sorted times'
    first, last or middle ones: a wrong answer that takes the list's middle, the fastest, the slowest or one middle
    of an even count then gives a value of its own, and the failure names its cause."""
    s = sorted(float(t) for t in times)
    n = len(s)
    while True:
        out = [s[i] for i in rng.permutation(n)]
        if n < 5 or out[n // 2] not in (s[0], s[-1], s[n // 2], s[n // 2 - 1]):
            return out


@exercise("14.2", nudges=(
    "A recipe that reached the target with only some of its seeds has not shown that it reaches it: what should its "
    "time be then?",
    "Which one number of a list stays put when its slowest entry gets ten times slower, and is not its fastest "
    "entry? With an even number of seeds, which number favours neither of the two seeds in the middle?",
), more="""\
  if not times or any(t is None for t in times):   # a seed that missed: the recipe has no time
      return None
  s = sorted(times)                                  # a new list: the caller's keeps its order
  n = len(s)
  return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2""")
def check_recipe_time(recipe_time, seed=0):
    """Exercise 14.2. Domain: random seeds' times (7 down to 1 seeds, odd and even numbers, in random order), one
    seed ten times slower than the rest, some lists with a seed that missed, all missing, one seed, none; the list
    left as it was (not sorted in place). A failure names its cause: a lucky (the fastest) seed, a mean that one slow
    seed moves, a miss ignored, one of an even count's two middles, the list's own middle, the list reordered."""
    ex = "Exercise 14.2"
    rng = np.random.default_rng(seed)
    slow = list(rng.uniform(0.02, 0.3, 5))
    slow[0] = 10 * max(slow)
    cases = [("5 seeds, one of them ten times slower than the rest", _shuffled(rng, slow))]
    for n in (7, 6, 5, 4, 3, 2, 1):   # the longest first: its failure tells a wrong answer's cause apart
        times = _shuffled(rng, rng.uniform(0.02, 0.3, n))
        cases.append((f"{n} seed{'s' if n > 1 else ''} that all reached the target", times))
    for n in (5, 2):
        times = [float(t) for t in rng.uniform(0.02, 0.3, n)]
        times[int(rng.integers(0, n))] = None
        cases.append((f"{n} seeds, one of which missed the target", times))
    cases += [("3 seeds that all missed", [None, None, None]), ("no seeds", [])]
    for name, times in cases:
        given = list(times)
        got = call(ex, f"with {name}", recipe_time, given)
        if given != times:
            order = lambda ts: sorted(ts, key=lambda t: (t is None, t or 0.0))  # noqa: E731
            fail(ex, f"with {name}", "the function reordered the caller's list" if order(given) == order(times)
                 else "the function changed the caller's list", "the list is the caller's (the seeds in the order "
                 "they ran): sort a copy (sorted() makes a new list), not the list itself")
        want = recipe_time_ref(times)
        if want is None and got is not None:
            fail(ex, f"with {name} ({times})", f"expected None, got {got!r}",
                 "no seed ran: the recipe has shown nothing, so it has no time" if not times else
                 "a seed missed the target, so the recipe has no time: leaving that seed out would give the recipe "
                 "the time of its lucky seeds")
        if want is not None and (got is None or not isinstance(got, (int, float, np.floating))
                                 or not np.isclose(got, want, rtol=1e-12)):
            fail(ex, f"with {name} ({times})", f"expected {want!r}, got {got!r}",   # the statistic is the exercise
                 _recipe_cause(times, got) or NOT_NAMED)
    return f"{len(cases)} lists of seeds' times (1 to 7 seeds, odd and even, one far slower, some missing, none)"
