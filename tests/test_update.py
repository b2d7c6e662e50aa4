"""Notebook 05's update kernels, launchers and optimizers against their NumPy twins; FlatParams' views; argument
checks; divergence detection.

Tolerance (float32): atol 1e-6 + rtol 1e-5 after 5 steps on parameters of order 1. Each step rounds a few times
(float32 keeps ~7 digits), and a GPU contracts a*b+c into one fused multiply-add where NumPy rounds twice."""
import math

import numpy as np
import pytest
from numba import cuda

import course
from course import update as U

TOL = dict(atol=1e-6, rtol=1e-5)
STEPS = 5
SMALL = {"W1": (13, 7), "b1": (7,), "W2": (7, 3), "b2": (3,)}  # odd sizes: padding between the tensors


def randn(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# --- kernels at explicit launch shapes -----------------------------------------------------------------

@pytest.mark.parametrize("n, block, spare", [(1, 32, 0), (257, 64, 0), (course.pick(1003, 301), 128, 1)])
def test_kernels_match_references_over_several_steps(n, block, spare):
    rng = np.random.default_rng(n)
    grid = U.cdiv(n, block) + spare
    lr, mu = np.float32(0.07), np.float32(0.85)
    b1, b2, eps = np.float32(0.9), np.float32(0.999), np.float32(1e-8)
    p, v0, zeros = randn(rng, n), randn(rng, n), np.zeros(n, np.float32)
    sgd_p = cuda.to_device(p)
    mom = [cuda.to_device(p), cuda.to_device(v0)]                         # momentum from a random velocity
    adam_state = [cuda.to_device(p), cuda.to_device(zeros), cuda.to_device(zeros)]
    want_sgd, want_mom, want_adam = p, (p, v0), (p, zeros, zeros)
    for t in range(1, STEPS + 1):
        g = randn(rng, n)
        g_d = cuda.to_device(g)
        U.sgd_kernel[grid, block](sgd_p, g_d, lr)
        U.momentum_kernel[grid, block](mom[0], g_d, mom[1], lr, mu)
        bc1, bc2 = np.float32(1 - 0.9 ** t), np.float32(1 - 0.999 ** t)
        U.adam_kernel[grid, block](adam_state[0], g_d, adam_state[1], adam_state[2], lr, b1, b2, eps, bc1, bc2)
        want_sgd = U.sgd_ref(want_sgd, g, lr)
        want_mom = U.momentum_ref(want_mom[0], g, want_mom[1], lr, mu)
        want_adam = U.adam_ref(want_adam[0], g, want_adam[1], want_adam[2], t, lr, 0.9, 0.999, 1e-8)
    np.testing.assert_allclose(sgd_p.copy_to_host(), want_sgd, **TOL)
    for d, h in zip(mom, want_mom):
        np.testing.assert_allclose(d.copy_to_host(), h, **TOL)
    for d, h in zip(adam_state, want_adam):
        np.testing.assert_allclose(d.copy_to_host(), h, **TOL)


# --- launchers: the launch shape follows the size -------------------------------------------------------

def test_launch_shape_covers_and_shrinks_small_blocks():
    assert U.launch_shape(1) == (1, 32)
    assert U.launch_shape(33) == (1, 64)
    assert U.launch_shape(256) == (1, 256)
    assert U.launch_shape(101_770) == (398, 256)
    for n in (1, 31, 32, 33, 255, 257, 1000):
        grid, block = U.launch_shape(n)
        assert block % 32 == 0 and block <= 256 and grid * block >= n > (grid - 1) * block


@pytest.mark.parametrize("n", [1, 33, 300])  # launch shapes (1, 32), (1, 64), (2, 256)
def test_launchers_match_references(n):
    rng = np.random.default_rng(10 + n)
    p = randn(rng, n)
    d = {k: cuda.to_device(a) for k, a in dict(sgd=p, mp=p, mv=np.zeros(n, np.float32), ap=p,
                                               am=np.zeros(n, np.float32), av=np.zeros(n, np.float32)).items()}
    sgd_h, mom_h, adam_h = p, (p, np.zeros(n, np.float32)), (p, np.zeros(n, np.float32), np.zeros(n, np.float32))
    for t in range(1, STEPS + 1):
        g = randn(rng, n)
        g_d = cuda.to_device(g)
        assert U.sgd(d["sgd"], g_d, 0.1) is d["sgd"]
        U.momentum(d["mp"], g_d, d["mv"], 0.1, mu=0.9)
        U.adam(d["ap"], g_d, d["am"], d["av"], t, lr=0.01)
        sgd_h = U.sgd_ref(sgd_h, g, 0.1)
        mom_h = U.momentum_ref(*mom_h[:1], g, mom_h[1], 0.1, 0.9)
        adam_h = U.adam_ref(adam_h[0], g, adam_h[1], adam_h[2], t, lr=0.01)
    got = {k: a.copy_to_host() for k, a in d.items()}
    np.testing.assert_allclose(got["sgd"], sgd_h, **TOL)
    np.testing.assert_allclose(got["mp"], mom_h[0], **TOL)
    np.testing.assert_allclose(got["mv"], mom_h[1], **TOL)
    for k, h in zip(("ap", "am", "av"), adam_h):
        np.testing.assert_allclose(got[k], h, **TOL)


# --- optimizers over a FlatParams, checked tensor by tensor --------------------------------------------

@pytest.mark.parametrize("name", ["SGD", "Momentum", "Adam"])
def test_optimizers_match_references_per_tensor(name):
    rng = np.random.default_rng(20)
    start = {k: randn(rng, s) for k, s in SMALL.items()}
    params = U.FlatParams(SMALL).copy_from_host(start)
    grads = params.zeros_like()
    opt = {"SGD": lambda: U.SGD(params, 0.05), "Momentum": lambda: U.Momentum(params, 0.05, mu=0.8),
           "Adam": lambda: U.Adam(params, lr=0.01, beta1=0.85, beta2=0.99, eps=1e-7)}[name]()
    state = {k: (a, np.zeros_like(a), np.zeros_like(a)) for k, a in start.items()}
    for t in range(1, STEPS + 1):
        g = {k: randn(rng, s) for k, s in SMALL.items()}
        opt.step(grads.copy_from_host(g))
        for k in SMALL:
            p, m, v = state[k]
            if name == "SGD":
                state[k] = (U.sgd_ref(p, g[k], 0.05), m, v)
            elif name == "Momentum":
                state[k] = (*U.momentum_ref(p, g[k], m, 0.05, 0.8), v)
            else:
                state[k] = U.adam_ref(p, g[k], m, v, t, 0.01, 0.85, 0.99, 1e-7)
    got = params.to_host()
    for k in SMALL:
        np.testing.assert_allclose(got[k], state[k][0], **TOL)
    if name == "Momentum":
        for k, v in opt.v.to_host().items():
            np.testing.assert_allclose(v, state[k][1], **TOL)
    if name == "Adam":
        assert opt.t == STEPS
        m_got, v_got = opt.m.to_host(), opt.v.to_host()
        for k in SMALL:
            np.testing.assert_allclose(m_got[k], state[k][1], **TOL)
            np.testing.assert_allclose(v_got[k], state[k][2], **TOL)
    flat = params.flat.copy_to_host()
    padding = np.ones(params.size, bool)
    for _, shape, offset in params.layout:
        padding[offset:offset + math.prod(shape)] = False
    assert padding.any() and not flat[padding].any(), "the padding between tensors must stay zero"


def test_adam_first_step_moves_every_parameter_by_lr():
    """Bias correction: at t = 1, m_hat = g and v_hat = g*g, so each parameter moves by lr * g / (|g| + eps)."""
    params = U.FlatParams({"w": (5,)})
    g = np.array([250.0, -3.0, 0.02, -1e-3, 5e-4], np.float32)
    U.Adam(params, lr=0.01).step(params.zeros_like().copy_from_host({"w": g}))
    np.testing.assert_allclose(params.to_host()["w"], -0.01 * np.sign(g), rtol=1e-4)


def test_momentum_with_mu_zero_is_sgd():
    rng = np.random.default_rng(21)
    a, b = U.FlatParams(SMALL), U.FlatParams(SMALL)
    start = {k: randn(rng, s) for k, s in SMALL.items()}
    a.copy_from_host(start), b.copy_from_host(start)
    opt_a, opt_b, grads = U.SGD(a, 0.1), U.Momentum(b, 0.1, mu=0.0), a.zeros_like()
    for _ in range(3):
        grads.copy_from_host({k: randn(rng, s) for k, s in SMALL.items()})
        opt_a.step(grads)
        opt_b.step(grads)
    np.testing.assert_array_equal(a.flat.copy_to_host(), b.flat.copy_to_host())


# --- FlatParams ---------------------------------------------------------------------------------------

def test_flat_params_layout_of_the_network():
    params = U.FlatParams({"W1": (784, 128), "b1": (128,), "W2": (128, 10), "b2": (10,)})
    assert params.size == 101_770 and params.flat.shape == (101_770,) and params.flat.dtype == np.float32
    assert params.offsets == {"W1": 0, "b1": 100_352, "W2": 100_480, "b2": 101_760}
    assert list(params) == ["W1", "b1", "W2", "b2"] and len(params) == 4
    for name, view in params.items():
        assert tuple(view.shape) == params.shapes[name] and view.dtype == np.float32
        assert view.is_c_contiguous()
    assert not params.flat.copy_to_host().any()  # zeros


def test_offsets_are_aligned():
    params = U.FlatParams(SMALL)
    assert all(o % U.ALIGN == 0 for o in params.offsets.values())
    assert params.offsets == {"W1": 0, "b1": 128, "W2": 192, "b2": 256} and params.size == 259
    assert U.FlatParams(SMALL, align=1).size == 91 + 7 + 21 + 3  # packed


def test_views_alias_the_flat_buffer():
    rng = np.random.default_rng(30)
    params = U.FlatParams(SMALL)
    W2 = randn(rng, (7, 3))
    params["W2"].copy_to_device(W2)                          # a write through a view ...
    flat = params.flat.copy_to_host()
    o = params.offsets["W2"]
    np.testing.assert_array_equal(flat[o:o + 21], W2.ravel())  # ... shows in .flat
    b1 = randn(rng, 7)
    params.flat[128:135].copy_to_device(b1)                   # a write into .flat ...
    np.testing.assert_array_equal(params["b1"].copy_to_host(), b1)  # ... shows in the view
    grads = params.zeros_like().copy_from_host({k: randn(rng, s) for k, s in SMALL.items()})
    before = params.to_host()
    U.SGD(params, 0.5).step(grads)                            # a kernel over .flat changes every view
    after, g = params.to_host(), grads.to_host()
    for k in SMALL:
        np.testing.assert_allclose(params[k].copy_to_host(), before[k] - np.float32(0.5) * g[k], **TOL)
        np.testing.assert_array_equal(params[k].copy_to_host(), after[k])


def test_copy_from_host_to_host_and_zeros_like():
    rng = np.random.default_rng(31)
    params = U.FlatParams(SMALL)
    host = {k: rng.standard_normal(s) for k, s in SMALL.items()}  # float64: cast on the way in
    assert params.copy_from_host(host) is params
    back = params.to_host()
    for k in SMALL:
        assert back[k].dtype == np.float32 and back[k].shape == SMALL[k]
        np.testing.assert_array_equal(back[k], host[k].astype(np.float32))
    back["W1"][:] = 0  # to_host returns copies
    assert params["W1"].copy_to_host().any()
    other = params.zeros_like()
    assert other.layout == params.layout and other.flat is not params.flat
    assert not other.flat.copy_to_host().any()
    assert "W1 (13, 7)" in repr(params) and "259" in repr(params)


def test_flat_params_refuses_bad_layouts_and_data():
    with pytest.raises(ValueError, match="non-empty dict"):
        U.FlatParams({})
    with pytest.raises(ValueError, match="positive"):
        U.FlatParams({"W": (3, 0)})
    with pytest.raises(ValueError, match="positive"):
        U.FlatParams({"W": (3, 2.5)})
    params = U.FlatParams(SMALL)
    with pytest.raises(KeyError, match="W3"):
        params["W3"]
    with pytest.raises(ValueError, match="missing"):
        params.copy_from_host({"W1": np.zeros((13, 7))})
    with pytest.raises(ValueError, match="unknown"):
        params.copy_from_host({**{k: np.zeros(s) for k, s in SMALL.items()}, "W3": np.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        params.copy_from_host({**{k: np.zeros(s) for k, s in SMALL.items()}, "W1": np.zeros((7, 13))})
    with pytest.raises(ValueError, match="dict"):
        params.copy_from_host(np.zeros(params.size))


# --- argument checks ----------------------------------------------------------------------------------

def test_launchers_refuse_bad_arguments():
    p = cuda.to_device(np.zeros(10, np.float32))
    g = cuda.to_device(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="device array"):
        U.sgd(np.zeros(10, np.float32), g, 0.1)
    with pytest.raises(ValueError, match="device array"):
        U.sgd(p, np.zeros(10, np.float32), 0.1)
    with pytest.raises(ValueError, match="dtype"):
        U.sgd(cuda.to_device(np.zeros(10)), g, 0.1)
    with pytest.raises(ValueError, match="dtype"):
        U.momentum(p, g, cuda.to_device(np.zeros(10)), 0.1)
    with pytest.raises(ValueError, match="shape"):
        U.sgd(p, cuda.to_device(np.zeros(11, np.float32)), 0.1)
    with pytest.raises(ValueError, match="1-D"):
        U.sgd(cuda.to_device(np.zeros((2, 5), np.float32)), g, 0.1)
    with pytest.raises(ValueError, match="contiguous"):
        U.sgd(cuda.to_device(np.zeros(20, np.float32))[::2], g, 0.1)
    with pytest.raises(ValueError, match="shape"):
        U.adam(p, g, cuda.to_device(np.zeros(9, np.float32)), p, 1)
    for bad in (0.0, -0.1, float("nan"), float("inf"), "0.1x"):
        with pytest.raises(ValueError, match="lr"):
            U.sgd(p, g, bad)
    with pytest.raises(ValueError, match="mu"):
        U.momentum(p, g, cuda.to_device(np.zeros(10, np.float32)), 0.1, mu=1.0)
    with pytest.raises(ValueError, match="step number"):
        U.adam(p, g, cuda.to_device(np.zeros(10, np.float32)), cuda.to_device(np.zeros(10, np.float32)), 0)
    with pytest.raises(ValueError, match="beta2"):
        U.adam(p, g, cuda.to_device(np.zeros(10, np.float32)), cuda.to_device(np.zeros(10, np.float32)), 1, beta2=1.0)


def test_optimizers_refuse_bad_arguments():
    params = U.FlatParams(SMALL)
    with pytest.raises(ValueError, match="FlatParams"):
        U.SGD({"W1": np.zeros((13, 7))}, 0.1)
    with pytest.raises(ValueError, match="lr"):
        U.SGD(params, -1.0)
    with pytest.raises(ValueError, match="mu"):
        U.Momentum(params, 0.1, mu=-0.5)
    with pytest.raises(ValueError, match="beta1"):
        U.Adam(params, beta1=1.5)
    with pytest.raises(ValueError, match="eps"):
        U.Adam(params, eps=0.0)
    for opt in (U.SGD(params, 0.1), U.Momentum(params, 0.1), U.Adam(params)):
        with pytest.raises(ValueError, match="zeros_like"):
            opt.step(params.to_host())                      # a dict of host arrays
        with pytest.raises(ValueError, match="zeros_like"):
            opt.step(params.flat)                           # a bare device array
        with pytest.raises(ValueError, match="same tensors"):
            opt.step(U.FlatParams({"W1": (13, 7), "b1": (7,)}))
        with pytest.raises(ValueError, match="same tensors"):
            opt.step(U.FlatParams({"W1": (7, 13), "b1": (7,), "W2": (7, 3), "b2": (3,)}))
    adam = U.Adam(params)
    with pytest.raises(ValueError):
        adam.step(None)
    assert adam.t == 0, "a refused step must not count"


# --- divergence ---------------------------------------------------------------------------------------

def test_check_loss_reports_divergence():
    U.check_loss(0, 2.3, 0.1)
    U.check_loss(5, 900.0, 0.1, first_loss=1.0)            # grew, but less than 1000 times
    for bad in (float("nan"), float("inf"), np.float32("nan")):
        with pytest.raises(U.Diverged, match=r"diverged at step 7 with lr=0.5: .*try a smaller learning rate"):
            U.check_loss(7, bad, 0.5, first_loss=1.0)
    with pytest.raises(U.Diverged, match=r"diverged at step 3 with lr=2: the loss grew from 0.5 to 1e\+04"):
        U.check_loss(3, 1e4, 2.0, first_loss=0.5)
    with pytest.raises(U.Diverged, match="10 times"):
        U.check_loss(3, 6.0, 2.0, first_loss=0.5, blowup=10)
    assert issubclass(U.Diverged, FloatingPointError)


def run_quadratic(lr, steps=40, a=4.0):
    """Minimise f(w) = a/2 |w|^2 with our SGD kernel; return the step at which check_loss raised, or None."""
    rng = np.random.default_rng(40)
    params = U.FlatParams({"w": (5,)}).copy_from_host({"w": randn(rng, 5)})
    grads, opt = params.zeros_like(), U.SGD(params, lr)
    first = None
    for step in range(steps):
        w = params.to_host()["w"]
        loss = 0.5 * a * float(np.sum(w * w))
        first = loss if first is None else first
        try:
            U.check_loss(step, loss, lr, first_loss=first)
        except U.Diverged as e:
            assert f"with lr={lr:g}" in str(e) and "try a smaller learning rate" in str(e)
            return step
        opt.step(grads.copy_from_host({"w": a * w}))
    return None


def test_divergence_is_detected_in_a_training_run():
    assert run_quadratic(0.3) is None           # below 2/a = 0.5: converges
    step = run_quadratic(0.9)                   # above: |1 - 0.9*4| = 2.6, the loss grows 6.8x per step
    assert step is not None and step <= 5


@pytest.mark.parametrize("lr", [True, np.bool_(True), "0.1", b"0.1"], ids=["True", "np.True_", "'0.1'", "b'0.1'"])
def test_a_learning_rate_must_be_a_number_not_a_bool_or_a_string(lr):
    """A regression: float(True) is 1.0 and float("0.1") is 0.1, so both were accepted as learning rates."""
    from course.update import sgd
    p, g = cuda.to_device(np.zeros(5, np.float32)), cuda.to_device(np.ones(5, np.float32))
    with pytest.raises(ValueError, match=f"lr must be a number, got {type(lr).__name__}"):
        sgd(p, g, lr)
    assert not p.copy_to_host().any()
