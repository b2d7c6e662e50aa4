"""Exercise 12.3's check (where a step's grid barriers go) passes the solution and another correct answer, rejects
planted one-line bugs naming each, and its real cases are the epoch kernel's and fused-history.md's designs."""
import pytest
from conftest import mutant

import course  # noqa: F401
from course.checks import CheckFailure
from course.checks import barriers as checks
from course.fused import barriers_needed


def test_solution_passes(capsys):
    checks.check_barriers_needed(barriers_needed)
    assert "passed: 39 lists of phases" in capsys.readouterr().out


def test_a_greedy_answer_on_the_circle_passes():
    """Another correct answer: cut the circle before each position in turn, then stab the spans greedily by their
    ends (interval stabbing), and keep the fewest; it places its barriers elsewhere than the solution does."""
    def barriers_greedy(phases):
        """The fewest barriers by greedy stabbing, the circle opened after each phase in turn."""
        n = len(phases)
        spans = [(p, (q - p) % n or n) for p in range(n) for q in range(n)       # (first position, length)
                 if phases[p][2] & (phases[q][1] | phases[q][2]) or phases[p][1] & phases[q][2]]
        best = [] if not spans else None
        for s in range(n * bool(spans)):
            cuts = [n - 1]                            # a barrier after phase s - 1: positions from s on, relative
            for first, last in sorted((((p - s) % n, (p - s) % n + length - 1) for p, length in spans),
                                      key=lambda span: span[1]):
                if not any(first <= c <= last for c in cuts):
                    cuts.append(last)                 # the span ending first: a barrier at its end serves the most
            cuts = sorted((c + s) % n for c in cuts)
            if best is None or len(cuts) < len(best):
                best = cuts
        return best
    assert barriers_greedy(checks._kernel_late()) == [0, 1]
    assert barriers_greedy(checks._logits_rotating(3)) == [0, 2, 4]
    assert barriers_greedy([("a", {"X"}, {"Y"}), ("b", set(), set()), ("c", {"Y"}, {"X"})]) != \
        checks.barriers_ref([("a", {"X"}, {"Y"}), ("b", set(), set()), ("c", {"Y"}, {"X"})])   # another placement
    checks.check_barriers_needed(barriers_greedy)


@pytest.mark.parametrize("old,new,said", [
    ("writes_p & (reads_q | writes_q) or reads_p & writes_q", "writes_p & (reads_q | writes_q)",
     "while another still reads it"),                                         # a read, then a write: no barrier
    ("writes_p & (reads_q | writes_q) or reads_p & writes_q", "writes_p & reads_q or reads_p & writes_q",
     "which write is left"),                                                  # two writes: no barrier
    ("for q in range(n):", "for q in range(p + 1, n):", "the steps repeat in one launch"),   # no next step
    ("for q in range(n):", "for q in set(range(n)) - {p}:", "meets itself in the next step"),  # a phase and itself
    ("for count in range(n + 1):", "for count in range(n, n + 1):", "suffice"),   # a barrier after every phase
    ("return list(cut)", "return [(k + 1) % n for k in cut]", "no barrier of yours falls between them"),  # before k
    ("return list(cut)", "return len(cut)", "not how many"),
    ("return list(cut)", "return list(cut)[::-1]", "sorted"),
    ("_, reads_p, writes_p = phases[p]", "_, reads_p, writes_p = phases[p]; reads_p |= writes_p",
     "changed the phases"),
])
def test_check_rejects(old, new, said):
    with pytest.raises(CheckFailure, match="Exercise 12.3") as e:
        checks.check_barriers_needed(mutant(barriers_needed, old, new))
    assert said in str(e.value), str(e.value)
    assert "the phases:\n    0: " in str(e.value)          # the case's phases listed under the message


def test_the_real_cases():
    """The epoch kernel needs 2 barriers a step wherever the small layer goes; with the TMA's Xt, 4 over 2 steps; the
    one-barrier kernels of fused-history.md 1 a step (logits over 3 copies; Z over 3 and the small layer over 2),
    and 2 with 2 copies of the logits; the check's cases include every kind of answer."""
    ref = checks.barriers_ref
    assert ref(checks._kernel_late()) == ref(checks._kernel_small_in_c()) == [0, 1]
    assert ref(checks._kernel_tma()) == [0, 1, 3, 4]
    assert ref(checks._logits_rotating(3)) == [0, 2, 4] and len(ref(checks._fused_one())) == 6
    assert len(ref(checks._logits_rotating(2))) == 4
    import numpy as np
    cases = checks._cases(np.random.default_rng(0))
    counts = [len(ref(p)) for _, p in cases]
    assert 0 in counts and 1 in counts and any(0 < c < len(p) - 1 for c, (_, p) in zip(counts, cases))
    assert max(len(p) for _, p in cases) == 12
    from pathlib import Path
    history = (Path(__file__).resolve().parent.parent / "notebooks/results/fused-history.md").read_text(encoding="utf-8")
    for script in ("fused_bytes.py", "fused_one.py", "fused_column.py"):   # the designs the check's cases model
        assert [row for row in history.splitlines() if row.startswith("| one barrier a step") and script in row], script
        assert script in " ".join(what for what, _ in cases), script
