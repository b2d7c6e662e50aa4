"""Checks for notebook 06's exercises: the training step and the evaluation pass, against the NumPy twins."""
import numpy as np
from numba import cuda

import course
from course.checks.core import fail, passed, raise_if_unimplemented
from course.grad import mlp_grads_ref, mlp_loss_ref

SIGNATURES = {}  # notebook 06 composes earlier kernels and defines none of its own


def _problem(rng, B, n_in, hidden):
    X = rng.random((B, n_in), dtype=np.float32)
    y = rng.integers(0, 10, B)
    p = dict(W1=rng.uniform(-1, 1, (n_in, hidden)).astype(np.float32) / np.float32(np.sqrt(n_in)),
             b1=rng.uniform(-0.1, 0.1, hidden).astype(np.float32),
             W2=rng.uniform(-1, 1, (hidden, 10)).astype(np.float32) / np.float32(np.sqrt(hidden)),
             b2=rng.uniform(-0.1, 0.1, 10).astype(np.float32))
    return X, y, p


def _nan_like(a):
    return cuda.to_device(np.full(a.shape, np.nan, np.float32))


def check_train_step(train_step, seed=0):
    """Exercise 6.1: one step with SGD changes the parameters exactly as the NumPy twin says, and returns the loss."""
    raise_if_unimplemented(train_step)
    from course.train import buffers
    from course.update import SGD, FlatParams
    ex = "Exercise 6.1"
    rng = np.random.default_rng(seed)
    for B, n_in, hidden, lr in ((7, course.pick(784, 49), 13, 0.5), (5, 30, 6, 0.1)):
        X, y, p = _problem(rng, B, n_in, hidden)
        case = f"with B={B}, {n_in}-{hidden}-10, SGD lr={lr}"
        params = FlatParams({k: v.shape for k, v in p.items()})
        params.copy_from_host(p)
        grads = params.zeros_like()
        grads.flat.copy_to_device(np.full(grads.size, np.nan, np.float32))  # a skipped backward shows as NaN
        buf = {k: _nan_like(v) for k, v in buffers(B, hidden).items()}      # so does a skipped forward
        loss = train_step(cuda.to_device(X), cuda.to_device(y), params, grads, SGD(params, lr), buf)
        if not hasattr(loss, "copy_to_host") or tuple(loss.shape) != (1,):
            fail(ex, case, f"returned {type(loss).__name__}, not the (1,) loss device array",
                 "return the loss that cross_entropy gives back, without copying it to the host")
        want_loss = mlp_loss_ref(X, y, **p)
        got_loss = float(loss.copy_to_host()[0])
        if not np.isclose(got_loss, want_loss, rtol=1e-5, atol=1e-6):
            fail(ex, case, f"loss: expected {want_loss:.6f} (before the update), got {got_loss:.6f}",
                 "forward (mlp_forward with the current params), then cross_entropy on its logits")
        g = mlp_grads_ref(X, y, **p)
        got = params.to_host()
        for name in p:
            want = p[name] - lr * g[name]
            if np.isnan(got[name]).any():
                fail(ex, case, f"{name} became NaN", "call mlp_backward to fill grads before opt.step(grads), "
                     "and pass it H and probs from THIS step's forward pass")
            if np.allclose(got[name], p[name], atol=1e-7) and np.abs(g[name]).max() > 1e-6:
                fail(ex, case, f"{name} did not change", "call opt.step(grads) after the backward pass")
            if not np.allclose(got[name], want, rtol=1e-4, atol=1e-6):
                i = tuple(int(k) for k in np.argwhere(~np.isclose(got[name], want, rtol=1e-4, atol=1e-6))[0])
                fail(ex, case, f"{name}{list(i)}: expected {want[i]:.6f} after the step, got {got[name][i]:.6f}",
                     "forward -> cross_entropy -> mlp_backward(Xb, yb, H, probs, W2, grads) -> opt.step(grads)")
    passed(ex, train_step, "2 random problems, loss and every parameter match the NumPy twin")


def check_evaluate(evaluate, seed=0):
    """Exercise 6.2: (loss, accuracy) of random parameters on random data, against the NumPy twin."""
    raise_if_unimplemented(evaluate)
    from course.update import FlatParams
    ex = "Exercise 6.2"
    rng = np.random.default_rng(seed)
    for N, n_in, hidden in ((37, 20, 9), (course.pick(1001, 11), course.pick(784, 49), 16)):
        X, y, p = _problem(rng, N, n_in, hidden)
        p["W2"] *= 8  # confident predictions, so that accuracy is far from chance and its errors show
        params = FlatParams({k: v.shape for k, v in p.items()})
        params.copy_from_host(p)
        case = f"with N={N}, {n_in}-{hidden}-10"
        got = evaluate(cuda.to_device(X), cuda.to_device(y), params)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(ex, case, f"expected a tuple (loss, accuracy), got {got!r}", "return two Python floats")
        loss, acc = got
        H = np.maximum(X @ p["W1"] + p["b1"], 0)
        want_acc = float(np.mean((H @ p["W2"] + p["b2"]).argmax(1) == y))
        want_loss = mlp_loss_ref(X, y, **p)
        if not isinstance(loss, float) or not isinstance(acc, float):
            fail(ex, case, f"got types ({type(loss).__name__}, {type(acc).__name__})",
                 "copy the two device scalars to the host and convert: float(...)")
        if not np.isclose(acc, want_acc, atol=1e-9):
            fail(ex, case, f"accuracy: expected {want_acc:.4f}, got {acc:.4f}",
                 "accuracy is count_correct / N, a fraction in [0, 1]")
        if not np.isclose(loss, want_loss, rtol=1e-5, atol=1e-6):
            fail(ex, case, f"loss: expected {want_loss:.6f}, got {loss:.6f}", "the mean cross-entropy over all N")
    passed(ex, evaluate, "2 random problems, loss and accuracy match the NumPy twin")
