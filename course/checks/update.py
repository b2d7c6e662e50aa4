"""Checks for notebook 05's exercises (the SGD, momentum and Adam update kernels).

Update kernels work IN PLACE: the parameters (and the optimizer's state) are inputs and outputs at once, so they
cannot be NaN-filled like run_cases' outputs. Instead each in/out array starts with random values inside guard
cells, the kernel runs several steps in a row on the same device buffers (fresh random gradients every step), and
after every step each array is compared with the NumPy reference: an element the kernel forgot keeps its value
(reported as unchanged), a write past an edge changes a guard cell, and a kernel that forgets to store its state
back, or uses it in the wrong order, drifts from the reference by the second step at the latest."""
from math import prod

import numpy as np
from numba import cuda

import course
from course.checks.core import (GUARD_FLOAT, _padded, check_guards, check_inputs, compare, exercise, fail,
                                launch, raise_if_unimplemented)
from course.update import adam_ref, momentum_ref, sgd_ref
from course.util import cdiv

STEPS = 5          # consecutive steps per case, on the same device buffers
ATOL, RTOL = 1e-6, 1e-5  # float32: a few roundings per step; a GPU fuses a*b+c into one FMA, NumPy rounds twice


def guarded_inout(a, guard):
    """An in/out array: `a`'s values on the device inside `guard` GUARD_FLOAT cells on every side.

    Returns (buffer, view of a's shape): the kernel gets the view, check_guards reads the whole buffer."""
    a = np.asarray(a)
    host = np.full(tuple(n + 2 * guard for n in a.shape), GUARD_FLOAT, dtype=a.dtype)
    inner = tuple(slice(guard, guard + n) for n in a.shape)
    host[inner] = a
    buf = cuda.to_device(host)
    return buf, buf[inner]


def run_inplace_steps(exercise, kernel, cases, hint, atol=ATOL, rtol=RTOL):
    """Run every case of an in-place update kernel for several steps and report the first problem.

    A case is dict(name, grid, block, names, state, steps): `state` are the host arrays updated in place
    (parameters first, then the optimizer's state, as named by `names`); each step is
    (gradient, scalars, expected state after the step). The kernel is called as
    kernel(state[0], gradient, *state[1:], *scalars): parameters, gradient, state, hyperparameters."""
    __tracebackhide__ = True
    raise_if_unimplemented(kernel)
    unit = lambda c: c.get("unit", c["block"])  # noqa: E731
    if {all(a.size % unit(c) == 0 for a in c["state"]) for c in cases} != {True, False}:
        raise ValueError(f"{exercise}'s check needs sizes that are and are not multiples of the block")
    for c in cases:
        block = c["block"] if isinstance(c["block"], tuple) else (c["block"],)
        grid = c["grid"] if isinstance(c["grid"], tuple) else (c["grid"],)
        threads = prod(grid) * prod(block)  # guard cells cover every thread past the end, spare blocks too
        guard = max(max(block), 4, threads - min(a.size for a in c["state"]))
        bufs = [guarded_inout(a, guard) for a in c["state"]]
        before = [np.asarray(a) for a in c["state"]]
        for k, (g, scalars, expected) in enumerate(c["steps"], 1):
            case = f"with {c['name']}, step {k} of {len(c['steps'])}, grid={c['grid']}, block={c['block']}"
            views = [view for _, view in bufs]
            g_host, g_buf, g_view = _padded(np.asarray(g), guard)
            args = [views[0], g_view, *views[1:], *scalars]
            launch(exercise, case, kernel, c["grid"], c["block"], args, hint)
            for (full, _), name, e, prev in zip(bufs, c["names"], expected, before):
                where = f"{case} (array {name})"
                full = full.copy_to_host()
                check_guards(exercise, where, full, guard, e.shape, hint)
                got = full[tuple(slice(guard, guard + n) for n in e.shape)]
                stale = (got == prev) & ~np.isclose(e, prev, atol=atol, rtol=rtol)
                if stale.any():
                    idx = tuple(int(i) for i in np.argwhere(stale)[0])
                    fail(exercise, where, f"{name}{list(idx)} did not change in this step (it still holds "
                         f"{prev[idx]!r}, expected {e[idx]!r}): never written, or the update came out as zero? "
                         f"({stale.sum()} of {stale.size} elements unchanged)", hint)
                compare(exercise, where, got, e, atol, rtol, hint)
            check_inputs(exercise, case, {0: (g_host, g_buf, guard, g.shape)}, ["g (the gradient)"], hint)
            before = list(expected)
    shapes = sorted({str(c["block"]) for c in cases})
    return (f"{len(cases)} random cases x {len(cases[0]['steps'])} steps (sizes that are and are not multiples "
            f"of the block), blocks {', '.join(shapes)}")


def _shapes():
    """(n, grid, block) per case: sizes that are not multiples of the block (the third case launches a spare
    block of threads that are all past the end), then one that is (every block full)."""
    out = []
    for n, block, spare in ((course.pick(100_003, 301), 128, 0), (course.pick(54_321, 97), 32, 0), (7, 64, 1),
                            (course.pick(1024 * 128, 256), 128, 0)):
        out.append((n, cdiv(n, block) + spare, block))
    return out


def _f32(x):
    return np.float32(x)


@exercise("5.1", more="""\
  i = cuda.grid(1)
  if i < p.size:
      p[i] = p[i] - lr * g[i]        # downhill (minus), written back into p; g is only read""")
def check_sgd_kernel(sgd_kernel, seed=0):
    """Exercise 5.1: p[i] -= lr * g[i] in place, several steps, odd sizes, several launch shapes."""
    rng = np.random.default_rng(seed)
    cases = []
    for n, grid, block in _shapes():
        p = rng.standard_normal(n).astype(np.float32)
        lr = _f32(rng.uniform(0.05, 0.5))
        steps, cur = [], p
        for _ in range(STEPS):
            g = rng.standard_normal(n).astype(np.float32)
            cur = sgd_ref(cur, g, lr)
            steps.append((g, (lr,), (cur,)))
        cases.append(dict(name=f"n={n}, lr={lr:.3f}", grid=grid, block=block, names=("p",), state=[p],
                          steps=steps))
    return run_inplace_steps("Exercise 5.1", sgd_kernel, cases,
                             hint="look at the direction of the step (downhill), at whether the new value is "
                                  "stored back into p (in place), and at the guard for threads past the end")


@exercise("5.2", more="""\
  i = cuda.grid(1)
  if i < p.size:
      vi = mu * v[i] + g[i]      # the new velocity ...
      v[i] = vi                  # ... stored for the next step ...
      p[i] -= lr * vi            # ... and the step along the NEW velocity""")
def check_momentum_kernel(momentum_kernel, seed=0):
    """Exercise 5.2: v = mu*v + g; p -= lr*v (PyTorch's convention), several steps so v must be stored back."""
    rng = np.random.default_rng(seed + 1)
    cases = []
    for k, (n, grid, block) in enumerate(_shapes()):
        p = rng.standard_normal(n).astype(np.float32)
        # the first case starts like training does (v = 0); the others mid-training, with velocity already built up
        v = np.zeros(n, np.float32) if k == 0 else rng.standard_normal(n).astype(np.float32)
        lr, mu = _f32(rng.uniform(0.05, 0.3)), _f32(rng.uniform(0.5, 0.95))
        steps, cur = [], (p, v)
        for _ in range(STEPS):
            g = rng.standard_normal(n).astype(np.float32)
            cur = momentum_ref(cur[0], g, cur[1], lr, mu)
            steps.append((g, (lr, mu), cur))
        cases.append(dict(name=f"n={n}, lr={lr:.3f}, mu={mu:.3f}, v {'= 0' if k == 0 else 'random'} at first",
                          grid=grid, block=block, names=("p", "v"), state=[p, v], steps=steps))
    return run_inplace_steps("Exercise 5.2", momentum_kernel, cases,
                             hint="look at the order (the velocity first, then the step with the new velocity), "
                                  "at whether v is stored back for the next step, and at PyTorch's convention "
                                  "(g is added to mu * v unscaled; lr multiplies the velocity)")


@exercise("5.3", more="""\
  i = cuda.grid(1)
  if i < p.size:
      m[i] = beta1 * m[i] + (1 - beta1) * g[i]          # both running averages stored back
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i]
      p[i] -= lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)   # eps OUTSIDE the sqrt; float32 constants""")
def check_adam_kernel(adam_kernel, seed=0):
    """Exercise 5.3: Adam with bias correction (PyTorch's convention), m and v stored back, several steps."""
    rng = np.random.default_rng(seed + 2)
    cases = []
    for k, (n, grid, block) in enumerate(_shapes()):
        p = rng.standard_normal(n).astype(np.float32)
        scale = 10.0 ** rng.uniform(-4, 0, n)  # per-parameter gradient scales: eps's place shows on the small ones
        if k == 0:  # from the first step, t = 1, like training
            t0, m, v = 0, np.zeros(n, np.float32), np.zeros(n, np.float32)
        else:       # mid-training: the corrections are still far from 1 for beta2 near 1
            t0 = int(rng.integers(5, 60))
            m = (0.5 * scale * rng.standard_normal(n)).astype(np.float32)
            v = (scale ** 2 * rng.uniform(0.05, 2.0, n)).astype(np.float32)
        lr = _f32(rng.uniform(0.01, 0.1))
        beta1, beta2 = _f32(rng.uniform(0.8, 0.95)), _f32(rng.uniform(0.99, 0.999))
        eps = _f32(10.0 ** rng.uniform(-8, -6))
        steps, cur = [], (p, m, v)
        for t in range(t0 + 1, t0 + STEPS + 1):
            g = (scale * rng.standard_normal(n)).astype(np.float32)
            cur = adam_ref(cur[0], g, cur[1], cur[2], t, lr, beta1, beta2, eps)
            bc1, bc2 = _f32(1 - float(beta1) ** t), _f32(1 - float(beta2) ** t)
            steps.append((g, (lr, beta1, beta2, eps, bc1, bc2), cur))
        cases.append(dict(name=f"n={n}, steps t={t0 + 1}..{t0 + STEPS}, lr={lr:.3f}, beta1={beta1:.3f}, "
                               f"beta2={beta2:.4f}", grid=grid, block=block, names=("p", "m", "v"),
                          state=[p, m, v], steps=steps))
    return run_inplace_steps("Exercise 5.3", adam_kernel, cases,
                             hint="look at both running averages (each stored back, v of the SQUARED gradient), "
                                  "at the bias corrections bc1 and bc2 (divide m and v by them), at where eps "
                                  "goes (after the square root) and at the order: the step uses the new m and v")
