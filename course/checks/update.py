"""Checks for notebook 05's exercises (the SGD, momentum and Adam update kernels).

Update kernels work IN PLACE: the parameters (and the optimizer's state) are inputs and outputs at once, so they
cannot be NaN-filled like run_cases' outputs. Instead each in/out array starts with random values inside guard
cells, the kernel runs several steps in a row on the same device buffers (fresh random gradients every step), and
after every step each array is compared with the NumPy reference: an element the kernel forgot keeps its value
(reported as unchanged), a write past an edge changes a guard cell, and a kernel that forgets to store its state
back, or uses it in the wrong order, drifts from the reference by the second step at the latest."""
import numpy as np

import course
from course.checks.core import (INPLACE_ATOL, INPLACE_RTOL, LARGEST_FLAT, MAX_THREADS, ON_THIS_DEVICE,
                                _run_inplace_case, exercise, on_a_gpu, only_blocks, run_inplace_steps)
from course.update import adam_ref, momentum_ref, sgd_ref
from course.runtime.util import cdiv

STEPS = 5          # consecutive steps per case, on the same device buffers
BIG = 2 * LARGEST_FLAT + 37  # past twice the course's largest flat parameter buffer (784-256-10: 203,530 floats)
BIG_BLOCK = 128    # the big case's block: in the simulator only its first and last blocks run (core.only_blocks)
EXTRA_STEPS = 2    # steps of the tiny-valued and the big case (a size or a skipped gradient shows in the first)
TINY = 1e-7        # the scale of every value in the tiny case (parameters, gradients, state)
ZEROS = 0.1        # the share of gradients that are exactly 0 (a dead ReLU unit's row of dW1 is)

def _extra_shapes():
    """The extra cases of an update check: (name, n, grid, block, scale, atol, keep) for the tiny-valued case and
    the one past the course's largest parameter buffer (keep: the blocks the simulator runs)."""
    big_grid = cdiv(BIG, BIG_BLOCK)
    return [("every value ~1e-7", 97, cdiv(97, 32), 32, TINY, INPLACE_ATOL * TINY, None),
            (f"n={BIG:,} (twice the 784-256-10 MLP's parameters)", BIG, big_grid, BIG_BLOCK, 1.0, INPLACE_ATOL,
             {0, big_grid - 1})]


def _gradient(rng, n, scale=1.0):
    """N(0, scale) gradients with a tenth of them exactly 0, as a dead ReLU unit gives."""
    g = (scale * rng.standard_normal(n)).astype(np.float32)
    g[rng.choice(n, int(n * ZEROS), replace=False)] = 0
    return g


def _run_extra(ex, kernel, cases, hint):
    """Run the tiny-valued and the big case (each with its own tolerance; the big one on a few blocks in the
    simulator, its other elements expected unchanged)."""
    __tracebackhide__ = True
    for c in cases:
        keep = c.pop("keep", None)
        if keep is not None and course.SIMULATOR:
            owned = np.zeros(c["state"][0].size, bool)
            for b in keep:
                owned[b * c["block"]:(b + 1) * c["block"]] = True
            c["steps"] = [(g, sc, tuple(np.where(owned, e, s0) for e, s0 in zip(exp, c["state"])), *slack)
                          for g, sc, exp, *slack in c["steps"]]
        with only_blocks(lambda b, keep=keep: keep is None or b[0] in keep):
            _run_inplace_case(ex, kernel, c, hint, c.pop("atol"), INPLACE_RTOL, ON_THIS_DEVICE)


def _shapes():
    """(n, grid, block) per case: sizes that are not multiples of the block (the third case launches a spare
    block of threads that are all past the end), then one that is (every block full)."""
    out = []
    for n, block, spare in ((course.pick(100_003, 173), 128, 0), (course.pick(54_321, 97), 32, 0), (7, 64, 1),
                            *on_a_gpu((1_000, MAX_THREADS, 0)), (course.pick(1024 * 128, 256), 128, 0)):
        out.append((n, cdiv(n, block) + spare, block))
    return out


def _f32(x):
    return np.float32(x)


U32 = 2.0 ** -24  # float32's unit roundoff: one rounding changes a value by at most this much of it


def _adam_slack(g, scalars, state, inherited):
    """How far a right kernel's p, m, v may lie from adam_ref's after one step, per element (float64 arrays): twice
    (the kernel's rounding and the reference's) a first-order bound on one float32 evaluation in any order, fused
    multiply-adds or not, plus what the step inherits from the state's earlier differences (`inherited`).

    Where beta1 * m and (1 - beta1) * g nearly cancel, the new m's error is a few ulps of those terms, not of m,
    and the step (lr times m over the root of v: about lr, whatever the scale of the values) carries it along."""
    lr, b1, b2, eps, bc1, bc2 = (float(x) for x in scalars)
    p, m, v = (a.astype(np.float64) for a in state)
    dp, dm, dv = inherited
    g = g.astype(np.float64)
    m_new = b1 * m + (1 - b1) * g
    v_new = b2 * v + (1 - b2) * g * g                       # a sum of two terms >= 0: no cancellation
    dm_new = b1 * dm + 2 * 3 * U32 * (np.abs(b1 * m) + np.abs((1 - b1) * g))  # 1 - beta1, the product, the sum
    dv_new = b2 * dv + 2 * 4 * U32 * v_new                  # 1 - beta2, two products, the sum
    d = np.sqrt(v_new / bc2) + eps
    rel_d = np.divide(dv_new, 2 * v_new, out=np.zeros_like(v_new), where=v_new > 0) + 2 * 4 * U32  # /, sqrt, +
    step = lr * m_new / (bc1 * d)
    d_step = lr * dm_new / (bc1 * d) + np.abs(step) * (rel_d + 2 * 3 * U32)  # times lr, / bc1, / d
    dp_new = dp + d_step + 2 * U32 * np.abs(p - step)       # the subtraction
    return dp_new, dm_new, dv_new


@exercise("5.1", nudges=(
    "Downhill: the parameter moves against the gradient, by lr times it. In place: where does the new value "
    "go?",
    "Only p changes; g is only read. One thread per parameter, and a guard for the threads past the end.",
), more="""\
  i = cuda.grid(1)
  if i < p.size:
      p[i] = p[i] - lr * g[i]        # downhill (minus), written back into p; g is only read""")
def check_sgd_kernel(sgd_kernel, seed=0):
    """Exercise 5.1: p[i] -= lr * g[i] in place, several steps, odd sizes, several launch shapes.

    Domain: sizes below, at and past a whole number of blocks and a spare block, up to BIG = 407,097 parameters
    (twice the course's largest FlatParams, 784-256-10; in the simulator only that case's first and last
    blocks run); p and g of both signs, a tenth of g exactly 0 (dead ReLU units), and a case where every value is
    about 1e-7, checked to a tolerance of that scale (a skipped small gradient shows); 5 steps in a row on the
    same buffers, a fresh gradient each (2 for the tiny and the big case); lr an np.float32 in [0.05, 0.5], as
    the launchers pass it."""
    rng = np.random.default_rng(seed)

    def case(k, name, n, grid, block, scale, count=STEPS):
        p = (scale * rng.standard_normal(n)).astype(np.float32)
        lr = _f32(rng.uniform(0.05, 0.5))
        steps, cur = [], p
        for _ in range(count):
            g = _gradient(rng, n, scale)
            cur = sgd_ref(cur, g, lr)
            steps.append((g, (lr,), (cur,)))
        return dict(name=f"{name}, lr={lr:.3f}", grid=grid, block=block, names=("p",), state=[p], steps=steps)

    hint = ("look at the direction of the step (downhill), at whether the new value is stored back into p (in "
            "place), at the guard for threads past the end (p.size, whatever it is), and at whether every "
            "parameter is updated, however small its gradient")
    return _run_all("Exercise 5.1", sgd_kernel, case, hint)


@exercise("5.2", nudges=(
    "Momentum keeps a velocity per parameter from step to step: where must the new velocity go so that the "
    "next step sees it?",
    "PyTorch's convention: the new velocity is mu times the old one plus the gradient, and the step goes "
    "along the NEW velocity, times lr.",
), more="""\
  i = cuda.grid(1)
  if i < p.size:
      vi = mu * v[i] + g[i]      # the new velocity ...
      v[i] = vi                  # ... stored for the next step ...
      p[i] -= lr * vi            # ... and the step along the NEW velocity""")
def check_momentum_kernel(momentum_kernel, seed=0):
    """Exercise 5.2: v = mu*v + g; p -= lr*v (PyTorch's convention), several steps so v must be stored back.

    Domain: as 5.1's (sizes up to 407,097 parameters, a tenth of the gradients exactly 0, a case of values about
    1e-7 at a tolerance of that scale, 5 steps), v = 0 at first (as training starts) in the first case and random
    (mid-training) in the others; lr, mu np.float32."""
    rng = np.random.default_rng(seed + 1)

    def case(k, name, n, grid, block, scale, count=STEPS):
        p = (scale * rng.standard_normal(n)).astype(np.float32)
        # the first case starts like training does (v = 0); the others mid-training, with velocity already built up
        v = np.zeros(n, np.float32) if k == 0 else (scale * rng.standard_normal(n)).astype(np.float32)
        lr, mu = _f32(rng.uniform(0.05, 0.3)), _f32(rng.uniform(0.5, 0.95))
        steps, cur = [], (p, v)
        for _ in range(count):
            g = _gradient(rng, n, scale)
            cur = momentum_ref(cur[0], g, cur[1], lr, mu)
            steps.append((g, (lr, mu), cur))
        return dict(name=f"{name}, lr={lr:.3f}, mu={mu:.3f}, v {'= 0' if k == 0 else 'random'} at first",
                    grid=grid, block=block, names=("p", "v"), state=[p, v], steps=steps)

    return _run_all("Exercise 5.2", momentum_kernel, case, hint={
        None: "look at the order (the velocity first, then the step with the new velocity), at whether v is "
              "stored back for the next step, at PyTorch's convention (g is added to mu * v unscaled; lr "
              "multiplies the velocity), and at the guard (p.size, whatever it is)",
        "v": "v is the velocity: mu times the old v plus the gradient, unscaled (PyTorch's convention), stored "
             "back into v for the next step, for every parameter: a gradient of 0 (or a tiny one) still decays v",
        "p": "v came out right, so look at the step: along the NEW velocity, times lr, downhill"})


@exercise("5.3", nudges=(
    "Adam keeps two running averages per parameter, of g and of g squared, stored back for the next step; the "
    "step uses them divided by their bias corrections bc1 and bc2.",
    "Where does eps go: inside the square root or after it? Is every constant float32 (in numba 1 - beta1 "
    "with a Python 1 is a float64; the spec writes np.float32(1.0) - beta1)?",
), more="""\
  i = cuda.grid(1)
  if i < p.size:
      m[i] = beta1 * m[i] + (np.float32(1.0) - beta1) * g[i]          # both running averages stored back
      v[i] = beta2 * v[i] + (np.float32(1.0) - beta2) * g[i] * g[i]   # (a Python 1 - beta1 is a float64)
      p[i] -= lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)   # eps OUTSIDE the sqrt; float32 constants""")
def check_adam_kernel(adam_kernel, seed=0):
    """Exercise 5.3: Adam with bias correction (PyTorch's convention), m and v stored back, several steps.

    Domain: as 5.1's (sizes up to 407,097 parameters, a tenth of the gradients exactly 0, a case of values about
    1e-7 at a tolerance of that scale, 5 steps), per-parameter gradient scales from 1e-4 to 1 (eps's place shows
    on the small ones), from t = 1 with m = v = 0 in the first case and mid-training (t from 6) in the others;
    lr, beta1, beta2, eps, bc1, bc2 np.float32. Tolerance: run_inplace_steps' plus a float32 error bound of each
    element's step (_adam_slack), which a GPU's fused multiply-adds need where m's update cancels."""
    rng = np.random.default_rng(seed + 2)

    def case(k, name, n, grid, block, size, count=STEPS):
        p = (size * rng.standard_normal(n)).astype(np.float32)
        scale = size * 10.0 ** rng.uniform(-4, 0, n)  # per-parameter gradient scales: eps's place shows on small ones
        if k == 0:  # from the first step, t = 1, like training
            t0, m, v = 0, np.zeros(n, np.float32), np.zeros(n, np.float32)
        else:       # mid-training: the corrections are still far from 1 for beta2 near 1
            t0 = int(rng.integers(5, 60))
            m = (0.5 * scale * rng.standard_normal(n)).astype(np.float32)
            v = (scale ** 2 * rng.uniform(0.05, 2.0, n)).astype(np.float32)
        lr = _f32(rng.uniform(0.01, 0.1))
        beta1, beta2 = _f32(rng.uniform(0.8, 0.95)), _f32(rng.uniform(0.99, 0.999))
        eps = _f32(10.0 ** rng.uniform(-8, -6) * size)
        steps, cur, slack = [], (p, m, v), (0.0, 0.0, 0.0)
        for t in range(t0 + 1, t0 + count + 1):
            g = (scale * _gradient(rng, n)).astype(np.float32)
            bc1, bc2 = _f32(1 - float(beta1) ** t), _f32(1 - float(beta2) ** t)
            scalars = (lr, beta1, beta2, eps, bc1, bc2)
            slack = _adam_slack(g, scalars, cur, slack)
            cur = adam_ref(cur[0], g, cur[1], cur[2], t, lr, beta1, beta2, eps)
            steps.append((g, scalars, cur, slack))
        return dict(name=f"{name}, steps t={t0 + 1}..{t0 + count}, lr={lr:.3f}, beta1={beta1:.3f}, "
                         f"beta2={beta2:.4f}", grid=grid, block=block, names=("p", "m", "v"), state=[p, m, v],
                    steps=steps)

    return _run_all("Exercise 5.3", adam_kernel, case, hint={
        None: "look at both running averages (each stored back, v of the SQUARED gradient), at the bias "
              "corrections bc1 and bc2 (divide m and v by them), at where eps goes (after the square root), at "
              "the order (the step uses the new m and v) and at the guard (p.size, whatever it is)",
        "m": "m is the running average of the gradient: beta1 times the old m, plus one minus beta1 times g, "
             "stored back into m, for every parameter: a gradient of 0 (or a tiny one) still decays m",
        "v": "v is the running average of the SQUARED gradient, with beta2 (not beta1), stored back into v, for "
             "every parameter, whatever its gradient",
        "p": "m and v came out right, so look at the step itself: m / bc1 and v / bc2, the square root of the "
             "corrected v, eps AFTER the square root, lr, and the sign (downhill)"})


def _run_all(ex, kernel, case, hint):
    """Build every case with case(k, name, n, grid, block, scale) and run them: the ordinary ones through
    run_inplace_steps, then the tiny-valued and the big one (_run_extra); return the summary."""
    __tracebackhide__ = True
    cases = [case(k, f"n={n}", n, grid, block, 1.0) for k, (n, grid, block) in enumerate(_shapes())]
    extra = [dict(case(k, name, n, grid, block, scale, EXTRA_STEPS), atol=atol, keep=keep)
             for k, (name, n, grid, block, scale, atol, keep) in enumerate(_extra_shapes(), len(cases))]
    done = run_inplace_steps(ex, kernel, cases, hint=hint)
    _run_extra(ex, kernel, extra, hint)
    return done + f", one of values ~{TINY:g} and one of {BIG:,} parameters"
