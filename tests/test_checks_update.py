"""Notebook 05's checks pass the solutions and reject each planted wrong update kernel."""
import math

import numpy as np
import pytest
from conftest import mutant, mutated, rejects
from numba import cuda

import course

from course.checks import core
from course.checks import update as checks
from course.update import adam_kernel, momentum_kernel, sgd_kernel


def test_solutions_pass():
    checks.check_sgd_kernel(sgd_kernel)
    checks.check_momentum_kernel(momentum_kernel)
    checks.check_adam_kernel(adam_kernel)



OOB = ["outside the output", "out-of-bounds"]  # a GPU writes into the guard cells; the simulator raises
STALE = ["did not change"]                    # an element the kernel never wrote
WRONG = ["expected"]


# --- planted wrong answers: each a mutation of the solution (tests/conftest.py: mutant), one row per bug ----
# A row's edits are (old, new) replacements applied in turn to the solution's source.

def bug(id, says, *edits):
    return pytest.param(edits, says, id=id)


@pytest.mark.parametrize("edits, says", [
    bug("no bounds guard", OOB, ("if i < p.size:", "if True:")),
    bug("off by one", OOB, ("i < p.size", "i <= p.size")),
    bug("sign error (uphill)", WRONG, ("p[i] -= lr * g[i]", "p[i] += lr * g[i]")),
    bug("ignores lr", WRONG, ("p[i] -= lr * g[i]", "p[i] -= g[i]")),
    bug("leaves the last parameter", STALE, ("i < p.size", "i < p.size - 1")),
    bug("forgets blockIdx", STALE, ("cuda.grid(1)", "cuda.threadIdx.x")),
    bug("not in place (writes g)", STALE, ("p[i] -= lr * g[i]", "g[i] = p[i] - lr * g[i]")),
    bug("reads the next gradient", WRONG + ["NaN", "never written", "out-of-bounds"], ("lr * g[i]", "lr * g[i + 1]")),
])
def test_sgd_check_rejects(edits, says):
    rejects(checks.check_sgd_kernel, mutated(sgd_kernel, *edits), "Exercise 5.1", says)


# p -= lr*g, then v = mu*v + g: steps with the bare gradient, updates the velocity afterwards (wrong order)
STEP_THEN_VELOCITY = ("p[i] -= lr * vi", "p[i] -= lr * g[i]")


@pytest.mark.parametrize("edits, says", [
    bug("velocity not stored", STALE, ("v[i] = vi", "vi = vi")),
    bug("steps then updates the velocity", WRONG, STEP_THEN_VELOCITY),
    bug("steps with the old velocity", WRONG, ("p[i] -= lr * vi", "p[i] -= lr * v_old"),
        ("vi = mu * v[i] + g[i]", "v_old = v[i]; vi = mu * v[i] + g[i]")),
    bug("no bounds guard", OOB, ("if i < p.size:", "if True:")),
    bug("off by one", OOB, ("i < p.size", "i <= p.size")),
    bug("sign error (uphill)", WRONG, ("p[i] -= lr * vi", "p[i] += lr * vi")),
    bug("ignores lr", WRONG, ("p[i] -= lr * vi", "p[i] -= vi")),
    bug("dampened: (1 - mu) * g", WRONG, ("+ g[i]", "+ (np.float32(1.0) - mu) * g[i]")),
    bug("lr inside the velocity", WRONG, ("mu * v[i] + g[i]", "mu * v[i] - lr * g[i]"),  # the same steps from v = 0,
        ("p[i] -= lr * vi", "p[i] += vi")),                                               # a different stored v
    bug("leaves the last parameter", STALE, ("i < p.size", "i < p.size - 1")),
])
def test_momentum_check_rejects(edits, says):
    rejects(checks.check_momentum_kernel, mutated(momentum_kernel, *edits), "Exercise 5.2", says)


def test_wrong_order_passes_one_step_from_zero_velocity_and_fails_the_next():
    """From v = 0 the first step of 'p -= lr*g, then v update' is right: only several steps expose it."""
    msg = rejects(checks.check_momentum_kernel, mutant(momentum_kernel, *STEP_THEN_VELOCITY), "Exercise 5.2", WRONG)
    assert "step 2 of 5" in msg, msg


ADAM_STEP = "p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)"


@pytest.mark.parametrize("edits, says", [
    bug("no bias correction", WRONG, ("(mi / bc1) / (math.sqrt(vi / bc2) + eps)", "mi / (math.sqrt(vi) + eps)")),
    bug("eps inside the sqrt", WRONG, ("/ (math.sqrt(vi / bc2) + eps)", "/ math.sqrt(vi / bc2 + eps)")),
    bug("m not stored", STALE, ("m[i] = mi", "mi = mi")),
    bug("v of |g|, not g*g", WRONG, ("gi * gi", "abs(gi)")),
    bug("steps with the old moments", WRONG, (ADAM_STEP, "pass"),   # steps before updating the moments
        ("gi = g[i]", "p[i] -= lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps); gi = g[i]")),
    bug("stores the corrected m", WRONG, ("m[i] = mi", "m[i] = mi / bc1")),  # not the running average
    bug("no bounds guard", OOB, ("if i < p.size:", "if True:")),
    bug("sign error (uphill)", WRONG, ("p[i] -= lr", "p[i] += lr")),
    bug("leaves the last parameter", STALE, ("i < p.size", "i < p.size - 1")),
])
def test_adam_check_rejects(edits, says):
    rejects(checks.check_adam_kernel, mutated(adam_kernel, *edits), "Exercise 5.3", says)


# --- a GPU's float32: `a * b + c` fused into one rounding (an FMA; numba's NVVM contracts by default) --------------
# The emulations below compute each fused a*b + c in float64 (the product of two float32s is exact there) and round
# once, so they give a GPU's answer on any machine. The compile gate rightly refuses float64 in a student's kernel,
# so these tests pass the kernel to the check without it.

@cuda.jit
def adam_fma_kernel(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    """The solution as the H100 compiled it (its value in issue 48's log, reproduced exactly): both running averages
    one fused multiply-add each, m's as (1 - beta1) * g + (beta1 * m rounded)."""
    i = cuda.grid(1)
    if i < p.size:
        gi = g[i]
        mi = np.float32(np.float64(np.float32(1.0) - beta1) * np.float64(gi) + np.float64(beta1 * m[i]))
        vi = np.float32(np.float64(beta2) * np.float64(v[i]) + np.float64((np.float32(1.0) - beta2) * gi * gi))
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_reordered_kernel(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    """A right answer written another way: the other product of m and of v fused, the step's factors in another
    order."""
    i = cuda.grid(1)
    if i < p.size:
        gi = g[i]
        mi = np.float32(np.float64(beta1) * np.float64(m[i]) + np.float64((np.float32(1.0) - beta1) * gi))
        vi = np.float32(np.float64((np.float32(1.0) - beta2) * gi) * np.float64(gi) + np.float64(beta2 * v[i]))
        m[i] = mi
        v[i] = vi
        p[i] = p[i] - (lr * mi) / (bc1 * (math.sqrt(vi) / math.sqrt(bc2) + eps))


@pytest.mark.parametrize("kernel", [adam_fma_kernel, adam_reordered_kernel], ids=["fused", "reordered"])
def test_adam_check_passes_a_gpus_float32(kernel, monkeypatch):
    """Adam's new m is a difference of two nearly equal terms for some parameters (beta1 * m against
    (1 - beta1) * g): a fused multiply-add changes it by an ulp of the terms, far more than an ulp of m, and the step
    with it. A GPU ran the solution so (t=59, 1 of 97 elements off by 1.4e-4 relative); the check must allow it."""
    monkeypatch.setattr(core, "compile_gate", lambda *a: None)
    checks.check_adam_kernel(kernel)



def test_adam_slack_covers_what_an_h100_computed(monkeypatch):
    """The H100's answer for the solution (issue 48's log: the tiny-valued case's steps t=59..60, element 43, step
    1) lies within the check's tolerance now, and was outside the old one (atol and rtol alone)."""
    extra = []
    monkeypatch.setattr(course, "SIMULATOR", False)  # build the cases a GPU gets (one more shape: other draws)
    monkeypatch.setattr(checks, "run_inplace_steps", lambda ex, k, c, **kw: "")
    monkeypatch.setattr(checks, "_run_extra", lambda ex, k, c, hint: extra.extend(c))
    checks.check_adam_kernel(adam_kernel)
    tiny = extra[0]
    assert tiny["name"].startswith("every value ~1e-7, steps t=59..60, lr=0.043"), tiny["name"]
    g, scalars, expected, slack = tiny["steps"][0]
    h100, e = np.float32(-1.5317724e-07), expected[0][43]
    assert e == np.float32(-1.5319912e-07)
    old = tiny["atol"] + core.INPLACE_RTOL * abs(e)
    assert old < abs(h100 - e) <= tiny["atol"] + slack[0][43] + core.INPLACE_RTOL * abs(e)
    # adam_fma_kernel's m gives it exactly: (1 - beta1) * g + (beta1 * m rounded), one rounding
    (p, m, v), (lr, beta1, beta2, eps, bc1, bc2) = (a[43] for a in tiny["state"]), scalars
    one = np.float32(1.0)
    mi = np.float32(np.float64(one - beta1) * np.float64(g[43]) + np.float64(beta1 * m))
    vi = beta2 * v + (one - beta2) * g[43] * g[43]
    assert p - lr * (mi / bc1) / (np.sqrt(vi / bc2) + eps) == h100


# --- the machinery ------------------------------------------------------------------------------------

def test_unimplemented_stub_raises_the_exercise_message():
    @cuda.jit
    def stub(p, g, v, lr, mu):
        raise NotImplementedError("Exercise 5.2: the momentum update kernel")

    with pytest.raises(NotImplementedError, match="Exercise 5.2: the momentum"):
        checks.check_momentum_kernel(stub)


def test_cases_are_random_odd_sized_multi_step_and_varied():
    cases, extra = [], []
    original = checks.run_inplace_steps, checks._run_extra
    try:
        checks.run_inplace_steps = lambda ex, k, c, **kw: cases.extend(c) or ""
        checks._run_extra = lambda ex, k, c, hint: extra.extend(c)
        checks.check_sgd_kernel(sgd_kernel)
        checks.check_momentum_kernel(momentum_kernel)
        checks.check_adam_kernel(adam_kernel)
    finally:
        checks.run_inplace_steps, checks._run_extra = original
    # the domain: past twice the course's largest parameter buffer, values of 1e-7 at a tolerance of that
    # scale, gradients exactly 0
    assert len(extra) == 6
    assert sum(c["state"][0].size > 2 * core.LARGEST_FLAT and c["state"][0].size % c["block"] != 0 for c in extra) == 3
    tiny = [c for c in extra if np.abs(c["state"][0]).max() < 1e-5]
    assert len(tiny) == 3 and all(c["atol"] <= 1e-12 for c in tiny)
    assert all((c["steps"][0][0] == 0).mean() > 0.05 for c in cases + extra if c["state"][0].size > 50)
    gpu = 3 * (not course.SIMULATOR)  # a GPU adds one case per check: the largest block (on_a_gpu)
    assert len(cases) == 12 + gpu
    assert sum(c["state"][0].size % c["block"] != 0 for c in cases) == 9 + gpu  # the last block sticks out
    assert sum(c["state"][0].size % c["block"] == 0 for c in cases) == 3  # and one case per check of full blocks
    for c in cases:
        n = c["state"][0].size
        assert c["grid"] * c["block"] >= n
        assert len(c["steps"]) >= 3                            # several steps on the same buffers
        grads = [s[0] for s in c["steps"]]
        for g in grads + [c["state"][0]]:
            if g.size > 8:
                assert len(np.unique(g)) > g.size // 2, "constant-like input"
                assert not np.all(np.diff(g) == np.diff(g)[0]), "arange-like input"
        assert not np.array_equal(grads[0], grads[1]), "a fresh gradient every step"
        assert all(isinstance(s, np.float32) for s in c["steps"][0][1]), "scalars reach the kernel as float32"
    assert len({c["block"] for c in cases}) >= 2                # several launch shapes
    assert any(c["block"] == 1024 for c in cases) or course.SIMULATOR  # the largest block a spec allows
    assert any(c["grid"] * c["block"] - c["state"][0].size >= c["block"] for c in cases)  # a spare block


# --- the failure names the quantity that is wrong (the state before the parameters it feeds) ----------------

@pytest.mark.parametrize("check, solution, exercise, edits, array, says", [
    (checks.check_adam_kernel, adam_kernel, "5.3",
     [("(np.float32(1.0) - beta2) * gi * gi", "(np.float32(1.0) - beta1) * gi * gi")], "v", "SQUARED gradient"),
    (checks.check_adam_kernel, adam_kernel, "5.3", [("beta1 * m[i] +", "beta2 * m[i] +")], "m",
     "average of the gradient"),
    (checks.check_adam_kernel, adam_kernel, "5.3",
     [("/ (math.sqrt(vi / bc2) + eps)", "/ math.sqrt(vi / bc2 + eps)")], "p", "came out right"),
    (checks.check_momentum_kernel, momentum_kernel, "5.2", [("+ g[i]", "+ (np.float32(1.0) - mu) * g[i]")], "v",
     "the velocity"),
], ids=["5.3 beta1 in v", "5.3 beta2 in m", "5.3 eps in the sqrt", "5.2 dampened velocity"])
def test_a_wrong_state_array_is_named_before_the_parameters(check, solution, exercise, edits, array, says):
    msg = rejects(check, mutated(solution, *edits), f"Exercise {exercise}", [f"(array {array})"])
    assert says in msg, msg


# --- answers that fit only the notebook's inputs (sizes, values), planted before the check changed ---
# Classes: a guard against the MLP's parameter count (FlatParams of 784-256-10 holds 203,530 floats: the check's
# sizes stopped at 131,072 on a GPU and 301 in the simulator), gradients below a threshold (or exactly 0, as a
# dead ReLU unit's are) skipped.

PARAMS_256 = ("i < p.size", "i < min(p.size, 203_530)")
SMALL_SKIPPED = ("if i < p.size:", "if i < p.size and abs(g[i]) > 1e-6:")
ZERO_SKIPPED = ("if i < p.size:", "if i < p.size and g[i] != 0:")


@pytest.mark.parametrize("check, solution, edit", [
    pytest.param(checks.check_sgd_kernel, sgd_kernel, PARAMS_256, id="5.1 guard of the MLP's parameter count"),
    pytest.param(checks.check_sgd_kernel, sgd_kernel, SMALL_SKIPPED, id="5.1 small gradients skipped"),
    pytest.param(checks.check_momentum_kernel, momentum_kernel, PARAMS_256,
                 id="5.2 guard of the MLP's parameter count"),
    pytest.param(checks.check_momentum_kernel, momentum_kernel, SMALL_SKIPPED, id="5.2 small gradients skipped"),
    pytest.param(checks.check_momentum_kernel, momentum_kernel, ZERO_SKIPPED, id="5.2 zero gradients skipped"),
    pytest.param(checks.check_adam_kernel, adam_kernel, PARAMS_256, id="5.3 guard of the MLP's parameter count"),
    pytest.param(checks.check_adam_kernel, adam_kernel, SMALL_SKIPPED, id="5.3 small gradients skipped"),
    pytest.param(checks.check_adam_kernel, adam_kernel, ZERO_SKIPPED, id="5.3 zero gradients skipped"),
])
def test_answers_for_the_notebooks_inputs_only_rejected(check, solution, edit):
    rejects(check, mutant(solution, *edit), f"Exercise {check.exercise}", STALE + WRONG)
