"""Notebook 05's checks pass the solutions and reject each planted wrong update kernel."""
import math

import numpy as np
import pytest
from conftest import rejects
from numba import cuda

from course.checks import update as checks
from course.update import adam_kernel, momentum_kernel, sgd_kernel


def test_solutions_pass():
    checks.check_sgd_kernel(sgd_kernel)
    checks.check_momentum_kernel(momentum_kernel)
    checks.check_adam_kernel(adam_kernel)



OOB = ["outside the output", "out-of-bounds"]  # a GPU writes into the guard cells; the simulator raises
STALE = ["did not change"]                    # an element the kernel never wrote
WRONG = ["expected"]


# --- planted wrong answers for Exercise 5.1 (SGD) -----------------------------------------------------

@cuda.jit
def sgd_no_guard(p, g, lr):
    i = cuda.grid(1)
    p[i] -= lr * g[i]


@cuda.jit
def sgd_off_by_one(p, g, lr):
    i = cuda.grid(1)
    if i <= p.size:
        p[i] -= lr * g[i]


@cuda.jit
def sgd_sign_error(p, g, lr):
    i = cuda.grid(1)
    if i < p.size:
        p[i] += lr * g[i]  # uphill


@cuda.jit
def sgd_ignores_lr(p, g, lr):
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= g[i]


@cuda.jit
def sgd_leaves_last(p, g, lr):
    i = cuda.grid(1)
    if i < p.size - 1:
        p[i] -= lr * g[i]


@cuda.jit
def sgd_block_only(p, g, lr):
    i = cuda.threadIdx.x  # forgets blockIdx: only the first block's worth of parameters moves
    if i < p.size:
        p[i] -= lr * g[i]


@cuda.jit
def sgd_not_in_place(p, g, lr):
    i = cuda.grid(1)
    if i < p.size:
        g[i] = p[i] - lr * g[i]  # the result goes to the wrong array: p never changes


@cuda.jit
def sgd_reads_next_gradient(p, g, lr):
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= lr * g[i + 1]  # off by one in the read only (the last one reads a guard cell)


@pytest.mark.parametrize("kernel, says", [
    (sgd_no_guard, OOB), (sgd_off_by_one, OOB), (sgd_sign_error, WRONG), (sgd_ignores_lr, WRONG),
    (sgd_leaves_last, STALE), (sgd_block_only, STALE), (sgd_not_in_place, STALE),
    (sgd_reads_next_gradient, WRONG + ["NaN", "never written", "out-of-bounds"]),
])
def test_sgd_check_rejects(kernel, says):
    rejects(checks.check_sgd_kernel, kernel, "Exercise 5.1", says)


# --- planted wrong answers for Exercise 5.2 (momentum) ------------------------------------------------

@cuda.jit
def momentum_not_stored(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        vi = mu * v[i] + g[i]
        p[i] -= lr * vi  # v[i] never written back: the next step starts from the old velocity


@cuda.jit
def momentum_step_then_velocity(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= lr * g[i]           # steps with the bare gradient ...
        v[i] = mu * v[i] + g[i]     # ... and updates the velocity afterwards (wrong order)


@cuda.jit
def momentum_old_velocity(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= lr * v[i]           # steps with the OLD velocity
        v[i] = mu * v[i] + g[i]


@cuda.jit
def momentum_no_guard(p, g, v, lr, mu):
    i = cuda.grid(1)
    vi = mu * v[i] + g[i]
    v[i] = vi
    p[i] -= lr * vi


@cuda.jit
def momentum_off_by_one(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i <= p.size:
        vi = mu * v[i] + g[i]
        v[i] = vi
        p[i] -= lr * vi


@cuda.jit
def momentum_sign_error(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        vi = mu * v[i] + g[i]
        v[i] = vi
        p[i] += lr * vi


@cuda.jit
def momentum_ignores_lr(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        vi = mu * v[i] + g[i]
        v[i] = vi
        p[i] -= vi


@cuda.jit
def momentum_dampened(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        vi = mu * v[i] + (np.float32(1.0) - mu) * g[i]  # an exponential average: not PyTorch's convention
        v[i] = vi
        p[i] -= lr * vi


@cuda.jit
def momentum_lr_in_velocity(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size:
        vi = mu * v[i] - lr * g[i]  # the other convention: the same steps from v = 0, a different stored v
        v[i] = vi
        p[i] += vi


@cuda.jit
def momentum_leaves_last(p, g, v, lr, mu):
    i = cuda.grid(1)
    if i < p.size - 1:
        vi = mu * v[i] + g[i]
        v[i] = vi
        p[i] -= lr * vi


@pytest.mark.parametrize("kernel, says", [
    (momentum_not_stored, STALE), (momentum_step_then_velocity, WRONG), (momentum_old_velocity, WRONG),
    (momentum_no_guard, OOB), (momentum_off_by_one, OOB), (momentum_sign_error, WRONG),
    (momentum_ignores_lr, WRONG), (momentum_dampened, WRONG), (momentum_lr_in_velocity, WRONG),
    (momentum_leaves_last, STALE),
])
def test_momentum_check_rejects(kernel, says):
    rejects(checks.check_momentum_kernel, kernel, "Exercise 5.2", says)


def test_wrong_order_passes_one_step_from_zero_velocity_and_fails_the_next():
    """From v = 0 the first step of 'p -= lr*g, then v update' is right: only several steps expose it."""
    msg = rejects(checks.check_momentum_kernel, momentum_step_then_velocity, "Exercise 5.2", WRONG)
    assert "step 2 of 5" in msg, msg


# --- planted wrong answers for Exercise 5.3 (Adam) ----------------------------------------------------

@cuda.jit
def adam_no_bias_correction(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        m[i] = mi
        v[i] = vi
        p[i] -= lr * mi / (math.sqrt(vi) + eps)


@cuda.jit
def adam_eps_inside_sqrt(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / bc1) / math.sqrt(vi / bc2 + eps)


@cuda.jit
def adam_m_not_stored(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        v[i] = vi
        p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_v_of_g_not_g_squared(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * abs(g[i])
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_old_moments(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        p[i] -= lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)  # steps before updating the moments
        m[i] = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        v[i] = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]


@cuda.jit
def adam_stores_corrected_m(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        m_hat = (beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]) / bc1
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        m[i] = m_hat  # the corrected mean is not the running average
        v[i] = vi
        p[i] -= lr * m_hat / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_no_guard(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
    vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
    m[i] = mi
    v[i] = vi
    p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_sign_error(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        m[i] = mi
        v[i] = vi
        p[i] += lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@cuda.jit
def adam_leaves_last(p, g, m, v, lr, beta1, beta2, eps, bc1, bc2):
    i = cuda.grid(1)
    if i < p.size - 1:
        mi = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]
        vi = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)


@pytest.mark.parametrize("kernel, says", [
    (adam_no_bias_correction, WRONG), (adam_eps_inside_sqrt, WRONG), (adam_m_not_stored, STALE),
    (adam_v_of_g_not_g_squared, WRONG), (adam_old_moments, WRONG), (adam_stores_corrected_m, WRONG),
    (adam_no_guard, OOB), (adam_sign_error, WRONG), (adam_leaves_last, STALE),
])
def test_adam_check_rejects(kernel, says):
    rejects(checks.check_adam_kernel, kernel, "Exercise 5.3", says)


# --- the machinery ------------------------------------------------------------------------------------

def test_unimplemented_stub_raises_the_exercise_message():
    @cuda.jit
    def stub(p, g, v, lr, mu):
        raise NotImplementedError("Exercise 5.2: the momentum update kernel")

    with pytest.raises(NotImplementedError, match="Exercise 5.2: the momentum"):
        checks.check_momentum_kernel(stub)


def test_cases_are_random_odd_sized_multi_step_and_varied():
    cases = []
    original = checks.run_inplace_steps
    try:
        checks.run_inplace_steps = lambda ex, k, c, **kw: cases.extend(c)
        checks.check_sgd_kernel(sgd_kernel)
        checks.check_momentum_kernel(momentum_kernel)
        checks.check_adam_kernel(adam_kernel)
    finally:
        checks.run_inplace_steps = original
    assert len(cases) == 12
    assert sum(c["state"][0].size % c["block"] != 0 for c in cases) == 9  # the last block sticks out
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
    assert any(c["grid"] * c["block"] - c["state"][0].size >= c["block"] for c in cases)  # a spare block
