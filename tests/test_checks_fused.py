"""The checks of notebooks 10, 11 and 12 (10.2, 11.1, 11.2, 12.1, 12.2) pass the solutions and reject planted wrong answers."""
import math
import os
import re
import subprocess
import sys

import pytest
from conftest import mutant
from numba import cuda, float32

import course  # noqa: F401  (before numba.cuda: the GPU or the simulator)
from course.checks import CheckFailure
from course.checks.core import LADDERS
from course.runtime import device
from course.tools import nbtools
from course.checks import fused as checks
from course.fused import halve, tile_origin, warp_class_sums, warp_sum
from course.ptx import barrier_target, shfl_xor


def test_solutions_pass():
    checks.check_warp_sum(warp_sum)
    checks.check_barrier_target(barrier_target)
    checks.check_halve(halve)
    checks.check_tile_origin(tile_origin)
    checks.check_warp_class_sums(warp_class_sums)


def test_different_correct_answers_pass():
    @cuda.jit(device=True)
    def warp_sum_up(scr, v):
        """The butterfly the other way round: masks 1, 2, 4, 8, 16."""
        m = 1
        while m < 32:
            v = v + shfl_xor(scr, v, m)
            m *= 2
        return v

    def barrier_target_up(old, blocks):
        """The next multiple of blocks above old, by rounding old + blocks down (uint64 throughout on the GPU)."""
        return (old + blocks) // blocks * blocks

    def barrier_target_mod(old, blocks):
        """The next multiple of blocks above old: old's own multiple, by its remainder, plus blocks."""
        return old - old % blocks + blocks

    checks.check_warp_sum(warp_sum_up)
    checks.check_barrier_target(barrier_target_up)
    checks.check_barrier_target(barrier_target_mod)


# --- Exercise 11.2: planted wrong butterflies ------------------------------------------------------------------

@pytest.mark.parametrize("old, new", [
    pytest.param("m = 16", "m = 8", id="half-warp sums (starts at 8)"),
    pytest.param("v += shfl_xor(scr, v, m)", "v = shfl_xor(scr, v, m)", id="takes the partner's value"),
    pytest.param("while m > 0:", "while m > 1:", id="stops before mask 1"),
    pytest.param("v += shfl_xor(scr, v, m)", "v += shfl_xor(scr, v, 1)", id="always the neighbour"),
])
def test_warp_sum_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 11.2"):
        checks.check_warp_sum(mutant(warp_sum, old, new))


def test_warp_sum_skipping_the_shuffle_in_some_lanes_hints_that_every_lane_must_call_it():
    """A fresh student's answer: the exchange only where the value is not 0 (the lanes past the end hold 0). The
    simulator's shuffle goes through a shared array, so a lane that skips a call breaks its partner's exchange (on a
    GPU a shuffle that a lane of its mask does not join is undefined): the failure says every lane must call it."""
    skipping = mutant(warp_sum, "v += shfl_xor(scr, v, m)", "if v != 0:\n            v += shfl_xor(scr, v, m)")
    with pytest.raises(CheckFailure, match="Exercise 11.2") as e:
        checks.check_warp_sum(skipping)
    assert "every lane must call shfl_xor in every exchange" in str(e.value), str(e.value)
    assert any("each lane must call shfl_xor in every exchange" in n for n in LADDERS["11.2"])  # and a nudge says it


# --- Exercise 10.2: planted wrong targets ----------------------------------------------------------------------

TARGET = "(old // blocks + uint64(1)) * blocks"


@pytest.mark.parametrize("old, new", [
    pytest.param(TARGET, "(old + uint64(1)) // blocks * blocks", id="rounds down (a race)"),
    pytest.param(TARGET, "old + blocks", id="old + blocks (deadlock)"),
    pytest.param(TARGET, "blocks", id="as if the count started at 0"),
    pytest.param(TARGET, "(old // blocks + uint64(2)) * blocks", id="the next barrier's count"),
])
def test_barrier_target_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 10.2"):
        checks.check_barrier_target(mutant(barrier_target, old, new))


@pytest.mark.parametrize("new, cause", [
    pytest.param("(old // blocks + 1) * blocks", "`+` of uint64 and the literal 1 (int64) gives int64",
                 id="int literal: signed int64 on the GPU"),
    pytest.param("(old // blocks + 1.0) * blocks", "`+` of uint64 and the literal 1.0 (float64) gives float64",
                 id="float literal"),
    pytest.param("math.floor(old / blocks + 1) * blocks", "`/` of uint64 and uint64 gives float64",
                 id="float division, floored"),
])
def test_barrier_target_check_rejects_a_count_that_leaves_uint64_on_the_gpu(new, cause):
    """Right in Python (the values match), wrong on the GPU: numba types the count as int64 or a float, so
    grid_barrier's wait compares the uint64 count in float64. The failure names the operation and its operands."""
    wrong = mutant(barrier_target, TARGET, new, scope={"math": math})
    assert int(wrong(263, 132)) == int(barrier_target(263, 132)) == 264   # the same count off the GPU
    with pytest.raises(CheckFailure, match="Exercise 10.2") as e:
        checks.check_barrier_target(wrong)
    line = next(ln for ln in str(e.value).splitlines() if "not a uint64 on the GPU" in ln)
    assert cause in line and new in line, line   # the operation, and the line of code that holds it


def test_notebook_10_shows_no_answer_to_10_2():
    """Issue 51: 10's grid_barrier computed (old // G + 1) * G, first in its shown cell, then in a helper of the
    collapsed cell ct2-2, two cells below exercise 10.2: an answer printed near its exercise either way. The student
    copy now holds that arithmetic in no cell, collapsed or not: ct2-2 compiles the student's own barrier_target as
    the barrier's device function, the barrier cell calls it, no later cell swaps the course's barrier back in, and
    the spec says the count stays uint64 on the GPU without the formula."""
    nb = nbtools.read(nbtools.EXERCISES / "10_phases.ipynb")
    answer = re.compile(r"//\s*\w+\s*\+\s*(?:uint64\()?1\)?\)\s*\*")   # (x // n + 1) * n, whatever the names
    assert answer.search("(arrive(bar) // G + uint64(1)) * G") and answer.search("(old // blocks + 1) * blocks")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not [c["id"] for c in code if answer.search(nbtools.source(c))]
    helper = next(c for c in code if "release_count =" in nbtools.source(c))
    assert re.search(r"^\s*release_count = cuda\.jit\(device=True, inline=True\)\(barrier_target\)",
                     nbtools.source(helper), re.M), nbtools.source(helper)
    shown = [c for c in code if not c["metadata"].get("jupyter", {}).get("source_hidden")]
    barrier = next(c for c in shown if "def grid_barrier" in nbtools.source(c) and "arrive(bar)" in nbtools.source(c))
    assert re.search(r"target = release_count\(arrive\(bar\), G\)", nbtools.source(barrier)), nbtools.source(barrier)
    assert not [c["id"] for c in code if re.search(r"from course\.ptx import .*grid_barrier", nbtools.source(c))]
    spec = next(nbtools.source(c) for c in nb["cells"] if "### Exercise 10.2" in nbtools.source(c))
    assert "same arithmetic" not in spec and "barrier's code below" not in spec, spec
    assert "uint64" in spec and not answer.search(spec), spec


# --- Exercise 12.1: planted wrong reduce-scatter steps ---------------------------------------------------------
@pytest.mark.parametrize("old,new", [
    ("!= 0", "== 0"),                                                       # each lane keeps its partner's half
    ("send = acc[k] if upper else acc[k + half]", "send = acc[k]"),         # the lower lanes send what they keep
    ("keep = acc[k + half] if upper else acc[k]", "keep = acc[k]"),         # the upper lanes keep the lower half
    ("acc[k] = keep + shfl_xor", "acc[k] = shfl_xor"),                      # the partner's value, not the sum
    ("range(half)", "range(half - 1)"),                                     # the last kept class left unsummed
    ("shfl_xor(scr, send, mask)", "shfl_xor(scr, send, half)"),             # the wrong partner
    ("cuda.threadIdx.x & mask", "cuda.threadIdx.x & half"),                 # the wrong bit picks the half
])
def test_halve_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 12.1"):
        checks.check_halve(mutant(halve, old, new))


def test_a_wrong_sum_is_named_by_thread_and_acc_index():
    with pytest.raises(CheckFailure, match=r"element \(thread \d+, acc index \d+\): expected"):
        checks.check_halve(mutant(halve, "acc[k] = keep +", "acc[k] = send +"))
    with pytest.raises(CheckFailure, match=r"element \(thread \d+\): expected"):
        checks.check_warp_class_sums(mutant(warp_class_sums, "return acc[0] +", "return acc[1] +"))


def test_halve_with_a_shuffle_in_each_branch_passes_from_volta_on():
    """A fresh reader's answer: the upper and lower lanes each call shfl_xor in their own branch. From
    compute capability 7.0 on (the T4, the H200) shfl.sync waits for the lanes of its mask at any shfl.sync, so it
    is right and passes; before 7.0 every lane must reach the same call (strict)."""
    both = mutant(halve, """        send = acc[k] if upper else acc[k + half]
        keep = acc[k + half] if upper else acc[k]
        acc[k] = keep + shfl_xor(scr, send, mask)""", """        if upper:
            acc[k] = acc[k + half] + shfl_xor(scr, acc[k], mask)
        else:
            acc[k] = acc[k] + shfl_xor(scr, acc[k + half], mask)""")
    checks.check_halve(both)
    assert checks.skipped_shuffle(both) is None and checks.skipped_shuffle(both, strict=True) is not None
    for solution in (halve, warp_sum, warp_class_sums):
        assert checks.skipped_shuffle(solution, strict=True) is None
    ternary = mutant(halve, "acc[k] = keep + shfl_xor(scr, send, mask)",
                     "acc[k] = keep + (shfl_xor(scr, send, mask) if upper else shfl_xor(scr, send, mask))")
    assert checks.skipped_shuffle(ternary) is None and checks.skipped_shuffle(ternary, strict=True) is not None


def test_halve_with_a_shuffle_only_some_lanes_make_is_refused_by_reading_its_code():
    """A shuffle in one arm only: the lanes of the other arm skip it. The code is read before anything runs (on a GPU
    the lanes that make it would wait for the others)."""
    one_arm = mutant(halve, "acc[k] = keep + shfl_xor(scr, send, mask)",
                     "acc[k] = keep + (shfl_xor(scr, send, mask) if upper else float32(0.0))")
    assert checks.skipped_shuffle(one_arm) is not None
    with pytest.raises(CheckFailure, match="a shuffle that not every lane makes"):
        checks.check_halve(one_arm)
    nested = mutant(halve, """        acc[k] = keep + shfl_xor(scr, send, mask)""", """        if upper:
            if k > 0:
                keep = keep + shfl_xor(scr, send, mask)
            acc[k] = keep
        else:
            acc[k] = keep + shfl_xor(scr, send, mask)""")
    assert checks.skipped_shuffle(nested) is not None   # as many calls in each arm, but one of them behind an if


def test_a_shuffle_check_that_cannot_read_the_code_says_so_in_its_pass_line(capsys):
    """A function made by exec of a string has no readable source (a Jupyter cell has one): the branch rule cannot be
    checked, and the pass line must not claim it was (a fresh reader's answer with an `if` passed silently)."""
    ns = {"cuda": cuda, "shfl_xor": shfl_xor}
    exec(compile("""
@cuda.jit(device=True)
def halve(acc, half, mask, scr):
    for k in range(half):
        if cuda.threadIdx.x & mask:
            acc[k] = acc[k + half] + shfl_xor(scr, acc[k], mask)
        else:
            acc[k] = acc[k] + shfl_xor(scr, acc[k + half], mask)
""", "<string>", "exec"), ns)
    checks.check_halve(ns["halve"])
    assert checks.UNREAD in capsys.readouterr().out
    checks.check_halve(halve)
    assert "passed" in (out := capsys.readouterr().out) and checks.UNREAD not in out

def test_warp_sum_check_rejects_a_sum_through_shared_memory_that_a_second_call_overwrites():
    """A student's answer without shuffles (a fresh student's): each lane writes scr, one barrier, then
    sums its warp's 32 cells. Called once it is right; called twice in a row, the second call's writes land while
    other lanes still read the first's."""
    @cuda.jit(device=True)
    def warp_sum_scr(scr, v):
        t = cuda.threadIdx.x
        scr[t] = v
        cuda.syncthreads()
        base = (t // 32) * 32
        s = float32(0)
        for k in range(32):
            s += scr[base + k]
        return s
    with pytest.raises(CheckFailure, match="Exercise 11.2"):
        checks.check_warp_sum(warp_sum_scr)


# --- Exercise 11.1: planted wrong tiles -------------------------------------------------------------------------
@pytest.mark.parametrize("old,new", [
    ("(hidden + TJ - 1) // TJ", "hidden // TJ"),                           # a narrow last tile of a row not counted
    ("(tile // jt) * TK", "(tile % jt) * TK"),                              # row and column swapped
    ("(tile % jt) * TJ", "(tile // jt) * TJ"),
    ("(tile // jt) * TK", "(tile // jt) * TJ"),                             # the inputs stepped by the units' width
    ("(tile % jt) * TJ", "(tile % jt) * TK"),
    ("return (tile // jt) * TK, (tile % jt) * TJ", "return (tile % jt) * TJ, (tile // jt) * TK"),   # (j0, k0)
    ("(hidden + TJ - 1) // TJ", "(hidden + TJ) // TJ"),                    # one tile too many per row
])
def test_tile_origin_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 11.1"):
        checks.check_tile_origin(mutant(tile_origin, old, new))


def test_tile_origin_numbered_along_the_inputs_is_rejected():
    """The other numbering (down the inputs first) would make every tile somebody's, but not the tile the kernels
    expect: block b must own the tile the plan gives it."""
    @cuda.jit(device=True)
    def along_inputs(tile, hidden):
        kt = 8                                                  # 784 inputs: 8 tiles down
        return (tile % kt) * 100, (tile // kt) * 8
    with pytest.raises(CheckFailure, match="Exercise 11.1"):
        checks.check_tile_origin(along_inputs)


# --- Exercise 12.2: planted wrong class sums ---------------------------------------------------------------------
@pytest.mark.parametrize("old,new", [
    ("return acc[0] + shfl_xor(scr, acc[0], 1)", "return acc[0]"),         # one parity's 16 lanes only
    ("shfl_xor(scr, acc[0], 1)", "shfl_xor(scr, acc[0], 16)"),             # the last exchange with the wrong lane
    ("halve(acc, 4, 8, scr)", "halve(acc, 4, 4, scr)"),                     # mask 8 never used, 4 twice
    ("halve(acc, 8, 16, scr)", "halve(acc, 8, 1, scr)"),                    # bit 0 used before the last exchange
    ("halve(acc, 1, 2, scr)", "pass"),                                      # a halving left out
    ("return acc[0] +", "return acc[1] +"),                                 # the wrong kept class
    ("return acc[0] + shfl_xor(scr, acc[0], 1)",                             # the last shuffle in a branch
     "return acc[0] + shfl_xor(scr, acc[0], 1) if cuda.threadIdx.x < 32 else acc[0]"),
])
def test_warp_class_sums_check_rejects(old, new):
    with pytest.raises(CheckFailure, match="Exercise 12.2"):
        checks.check_warp_class_sums(mutant(warp_class_sums, old, new))


def test_class_sums_mistakes_are_named():
    """The two typical wrong class sums are named: one parity's 16 lanes only, and the right sums at the wrong lanes
    (the masks in the reverse order, the last exchange with lane ^ 16)."""
    with pytest.raises(CheckFailure, match="add up to the right one: each is its class over the 16 lanes of its own"):
        checks.check_warp_class_sums(mutant(warp_class_sums, "return acc[0] + shfl_xor(scr, acc[0], 1)",
                                            "return acc[0]"))

    @cuda.jit(device=True)
    def class_sums_reversed(acc, scr):
        halve(acc, 8, 1, scr)
        halve(acc, 4, 2, scr)
        halve(acc, 2, 4, scr)
        halve(acc, 1, 8, scr)
        return acc[0] + shfl_xor(scr, acc[0], 16)

    with pytest.raises(CheckFailure, match="Each warp returns the right 16 sums, at the wrong lanes"):
        checks.check_warp_class_sums(class_sums_reversed)


def test_warp_sum_failures_are_no_answer():
    """A failing 11.2 (wrong sums, or more shuffles than the spec) says what is wrong, not the masks or what an
    exchange adds."""
    for old, new in (("m = 16", "m = 8"), ("while m > 0:", "while m > 1:"),
                     ("v += shfl_xor(scr, v, m)", "v += shfl_xor(scr, v, m) + 0 * shfl_xor(scr, v, m)")):
        with pytest.raises(CheckFailure) as e:
            checks.check_warp_sum(mutant(warp_sum, old, new))
        msg = str(e.value)
        assert "16, 8" not in msg and "partner's value" not in msg and "hint('11.2')" in msg, msg


def test_class_sums_hint_is_no_answer():
    """A failing 12.2 says what to look at, not the answer's masks (those are the ladder's last level)."""
    with pytest.raises(CheckFailure) as e:
        checks.check_warp_class_sums(mutant(warp_class_sums, "halve(acc, 1, 2, scr)", "pass"))
    assert "16, 8, 4, 2" not in str(e.value) and "hint('12.2')" in str(e.value)


def test_class_sums_by_warp_sum_per_class_are_refused():
    """Right sums the slow way: warp_sum once per class (80 shuffles), not the reduce-scatter the exercise asks for."""
    @cuda.jit(device=True)
    def class_sums_by_warp_sum(acc, scr):
        mine = float32(0.0)
        for c in range(16):
            s = warp_sum(scr, acc[c])
            if c == (cuda.threadIdx.x % 32) >> 1:
                mine = s
        return mine

    with pytest.raises(CheckFailure, match="it calls warp_sum: 5 shuffles a class"):
        checks.check_warp_class_sums(class_sums_by_warp_sum)


def test_other_correct_tile_origins_and_class_sums_pass():
    """Correct answers written differently from the solutions: the tiles counted by a ceiling division written with
    negation, and the class sums' halvings in a loop with the last exchange into a local."""
    from course.fused import TJ, TK

    @cuda.jit(device=True)
    def tile_origin_neg(tile, hidden):
        per_row = -(-hidden // TJ)
        row = tile // per_row
        return row * TK, (tile - row * per_row) * TJ

    @cuda.jit(device=True)
    def class_sums_loop(acc, scr):
        half = 8
        while half > 0:
            halve(acc, half, 2 * half, scr)
            half //= 2
        s = acc[0]
        s += shfl_xor(scr, s, 1)
        return s

    checks.check_tile_origin(tile_origin_neg)
    checks.check_warp_class_sums(class_sums_loop)


# --- the spec's count of shuffles (16), counted, not read from the names called --------------------------

@cuda.jit(device=True)
def halve_all_reduce(acc, half, mask, scr):
    """Right sums, twice the shuffles: every lane exchanges all 2 half classes, then keeps its half."""
    upper = (cuda.threadIdx.x & mask) != 0
    for k in range(2 * half):
        acc[k] += shfl_xor(scr, acc[k], mask)
    for k in range(half):
        acc[k] = acc[k + half] if upper else acc[k]


def test_class_sums_with_31_shuffles_are_refused():
    """16 + 8 + 4 + 2 + 1 = 31 shuffles a lane, where the spec says 16: the check counts the shuffles each lane makes."""
    wrong = mutant(warp_class_sums, "def warp_class_sums(", "def warp_class_sums(", scope={"halve": halve_all_reduce})
    with pytest.raises(CheckFailure, match="Exercise 12.2"):
        checks.check_warp_class_sums(wrong)


@pytest.mark.parametrize("check, fn", [
    pytest.param(checks.check_warp_sum, mutant(warp_sum, "v += shfl_xor(scr, v, m)",
                                                "v += shfl_xor(scr, v, m) + 0 * shfl_xor(scr, v, m)"), id="11.2 ten"),
    pytest.param(checks.check_halve, mutant(halve, "acc[k] = keep + shfl_xor(scr, send, mask)",
                                            "acc[k] = keep + shfl_xor(scr, send, mask) + 0 * shfl_xor(scr, keep, mask)"),
                 id="12.1 both halves sent"),
])
def test_shuffle_counts_are_the_specs(check, fn):
    """Right sums with more shuffles than the spec says (11.2: five; 12.1: one per kept class) are refused."""
    with pytest.raises(CheckFailure, match="calls of shfl_xor, where the spec says"):
        check(fn)


@pytest.mark.parametrize("fn, which, spec", [(warp_sum, 0, 5), (halve, 1, 8), (warp_class_sums, 2, 16)],
                         ids=["11.2", "12.1", "12.2"])
def test_the_solutions_shuffles_are_counted(fn, which, spec):
    """A count on every device, the spec's in every lane (None, no count, let any count of shuffles through)."""
    assert list(checks.shuffles_per_lane(fn, which)) == [spec] * checks.WARP


exchange = shfl_xor  # course.ptx's shuffle under another name


@cuda.jit(device=True)
def warp_sum_ten(scr, v):
    """The right sum by ten exchanges, through `exchange`: masks 16, 8, 4, 2, 1, each done twice (the second adds 0)."""
    m = 16
    while m > 0:
        v += exchange(scr, v, m) + 0 * exchange(scr, v, m)
        m //= 2
    return v


def test_shuffles_are_counted_under_another_name():
    """The count replaces course.ptx's shfl_xor itself, not only the name shfl_xor."""
    assert list(checks.shuffles_per_lane(warp_sum_ten, 0)) == [10] * checks.WARP
    with pytest.raises(CheckFailure, match="lane 0 made 10 calls of shfl_xor, where the spec says 5"):
        checks.check_warp_sum(warp_sum_ten)


def test_a_shuffle_check_that_cannot_count_says_so_in_its_pass_line(monkeypatch, capsys):
    """No count (the counting run failed) is no failure, but the pass line must not claim the spec's count."""
    def broken(*a):
        raise RuntimeError("no counting kernel")
    checks.check_warp_sum(warp_sum)
    assert "could not be counted" not in capsys.readouterr().out
    monkeypatch.setattr(checks, "_count_kernel", broken)
    checks.check_warp_sum(warp_sum)
    out = capsys.readouterr().out
    assert "passed" in out and "the shuffles could not be counted (the counting run raised RuntimeError)" in out, out


# The count runs as a real kernel on a GPU, which the simulator never compiles: its shared array of 2 * SCRATCH cells
# (a shape numba-cuda does not fold into a constant) failed every GPU compile, so no count was made there.
COMPILE_COUNTERS = """
from numba import cuda, float32
import course
assert not course.SIMULATOR
from course.checks import fused as F
from course.fused import halve, warp_class_sums, warp_sum
from course.runtime.device import pretend_device
with pretend_device((9, 0)):  # no GPU here: numba-cuda asks the device's compute capability for device functions
    for which, fn in enumerate((warp_sum, halve, warp_class_sums)):
        kernel = F._count_kernel(F._counting(fn, F._shfl_counter()), which)
        ptx, _ = cuda.compile_ptx(kernel.py_func, (float32[:, :], float32[:]), cc=(9, 0))
        print(fn.py_func.__name__, ptx.count("shfl.sync"))
"""


@pytest.mark.skipif(bool(device.simulator_only()), reason=f"{device.simulator_only()}; CI compiles on Linux")
def test_the_shuffle_counting_kernels_compile_for_a_gpu():
    r = subprocess.run([sys.executable, "-c", COMPILE_COUNTERS], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0"})
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    counts = dict(line.split() for line in r.stdout.splitlines())
    assert set(counts) == {"warp_sum", "halve", "warp_class_sums"} and all(int(n) > 0 for n in counts.values()), counts
