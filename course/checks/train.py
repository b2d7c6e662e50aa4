"""Checks for notebook 06's exercises: the training step and the evaluation pass, against the NumPy twins."""
import numpy as np
from numba import cuda

import course
from course.checks.core import call, exercise, fail
from course.grad import mlp_grads_ref, mlp_loss_ref


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


def _optimizer(kind, params, rng):
    """A fresh optimizer of `kind` over params, with state that makes its step differ from plain SGD's."""
    from course.update import SGD, Adam, Momentum
    if kind == "sgd":
        return SGD(params, 0.5)
    if kind == "momentum":
        opt = Momentum(params, 0.1, mu=0.9)
        opt.v.flat.copy_to_device(rng.standard_normal(params.size).astype(np.float32))  # velocity built up
        return opt
    # eps well above float32 noise in the gradient, so that g / (sqrt(v) + eps) is stable to compare
    return Adam(params, 0.01, eps=1e-3)


def _twin(opt, p):
    """An optimizer of opt's class and state over a copy of the parameters p (host dict)."""
    from course.update import FlatParams
    params = FlatParams({k: v.shape for k, v in p.items()}).copy_from_host(p)
    twin = _optimizer(type(opt).__name__.lower(), params, np.random.default_rng(0))
    for name in ("v", "m"):
        if hasattr(opt, name):
            getattr(twin, name).flat.copy_to_device(getattr(opt, name).flat.copy_to_host())
    if hasattr(opt, "t"):
        twin.t = opt.t
    return twin


@exercise("6.1", nudges=(
    "A training step is forward, loss, backward, update: which function does each, and into which of the "
    "buffers you were given does each write?",
    "Which optimizer takes the step: the one passed in. What comes back: the loss, left on the device: no "
    "copy to the host and no allocation inside the step.",
), more="""\
  H, logits = mlp_forward(Xb, params["W1"], params["b1"], params["W2"], params["b2"], H=buf["H"], logits=buf["logits"])
  loss, probs = cross_entropy(logits, yb, probs=buf["probs"], losses=buf["losses"], loss=buf["loss"])
  mlp_backward(Xb, yb, H, probs, params["W2"], grads, work=buf)
  opt.step(grads)          # the optimizer you were given, whatever it is
  return loss              # a device array: not read here""")
def check_train_step(train_step, seed=0):
    """Exercise 6.1. Domain: steps with SGD, momentum and Adam on random problems of batches 7 and 6 (two steps
    each: repeated calls, new state) and 130 (one step; above twice the notebook's 64: no batch size taken from the
    notebook), 784 inputs on a GPU; the parameters change as the NumPy twin's gradients and the same optimizer say, the loss comes back as the
    (1,) device array, and a step neither reads anything back nor allocates after its first."""
    from course.checks.loss import _HostCopy, no_host_copies
    from course.train import buffers
    from course.update import FlatParams
    ex = "Exercise 6.1"
    hint = ("look at the order (forward, loss, backward, update), at where each call writes (the buffers in buf, "
            "the grads you were given), at which optimizer takes the step (the one passed in), and at what is "
            "returned (the loss device array, not read)")
    rng = np.random.default_rng(seed)
    for kind, B, n_in, hidden in (("sgd", 7, course.pick(784, 49), 13), ("momentum", 130, 10, 5),
                                  ("adam", 6, 20, 5)):
        X, y, p = _problem(rng, B, n_in, hidden)
        params = FlatParams({k: v.shape for k, v in p.items()})
        params.copy_from_host(p)
        opt = _optimizer(kind, params, rng)
        twin = _twin(opt, p)
        grads = params.zeros_like()
        grads.flat.copy_to_device(np.full(grads.size, np.nan, np.float32))  # a skipped backward shows as NaN
        buf = {k: _nan_like(v) for k, v in buffers(B, hidden).items()}      # so does a skipped forward
        X_d, y_d = cuda.to_device(X), cuda.to_device(y)
        steps = (1, 2) if B < 64 else (1,)   # one step of the big batch: the simulator's time
        for step in steps:
            case = (f"with B={B}, {n_in}-{hidden}-10, {type(opt).__name__} (lr={opt.lr}), step {step} of "
                    f"{len(steps)}")
            before = twin.params.to_host()
            try:  # the first step may allocate what it keeps in buf; after that, nothing new and nothing read
                with no_host_copies(to_device=step > 1, allocations=step > 1):
                    loss = call(ex, case, train_step, X_d, y_d, params, grads, opt, buf, hint=hint)
            except _HostCopy as e:
                fail(ex, case, f"train_step {e}", "a step must not wait for the GPU or allocate: read the loss "
                     "only every few steps, outside train_step, and reuse the arrays in buf; " + hint)
            if not hasattr(loss, "copy_to_host") or tuple(loss.shape) != (1,):
                fail(ex, case, f"returned {type(loss).__name__}, not the (1,) loss device array",
                     "return the loss that cross_entropy gives back, without copying it to the host")
            want_loss = mlp_loss_ref(X, y, **before)
            got_loss = float(loss.copy_to_host()[0])
            if not np.isclose(got_loss, want_loss, rtol=1e-5, atol=1e-6):
                fail(ex, case, f"loss: expected {want_loss:.6f} (before the update), got {got_loss:.6f}",
                     "the loss comes from the forward pass with the current params, before the update")
            g = mlp_grads_ref(X, y, **before)
            _gradients_match(ex, case, grads.to_host(), g)
            ref_grads = twin.params.zeros_like().copy_from_host(g)
            twin.step(ref_grads)
            want, got = twin.params.to_host(), params.to_host()
            for name in p:
                if np.isnan(got[name]).any():
                    fail(ex, case, f"{name} became NaN", "fill grads with the backward pass of THIS step's "
                         "forward (its H and probs) before the update")
                if np.allclose(got[name], before[name], atol=1e-7) and np.abs(g[name]).max() > 1e-6:
                    fail(ex, case, f"{name} did not change", "the update comes after the backward pass")
                if not np.allclose(got[name], want[name], rtol=1e-4, atol=1e-6):
                    i = tuple(int(k) for k in np.argwhere(~np.isclose(got[name], want[name], rtol=1e-4,
                                                                      atol=1e-6))[0])
                    fail(ex, case, f"{name}{list(i)}: expected {want[name][i]:.6f} after the step, got "
                         f"{got[name][i]:.6f}", hint)
    return ("3 random problems (SGD, momentum, Adam; batches 7, 130 and 6), 5 steps: loss and every parameter match "
            "the NumPy twin")


def _gradients_match(ex, case, got, want):
    """Fail on the first gradient in grads (what the step's backward pass wrote) that differs from the twin's,
    naming it: a wrong argument of mlp_backward shows there, before the optimizer mixes it into the parameters."""
    __tracebackhide__ = True
    for name in want:
        close = np.isclose(got[name], want[name], rtol=1e-4, atol=1e-6)
        if not close.all():
            i = tuple(int(k) for k in np.argwhere(~close)[0])
            fail(ex, case, f"the gradient d{name}{list(i)} (in grads, from this step's backward pass, before the "
                 f"update): expected {want[name][i]:.6f}, got {got[name][i]:.6f}",
                 "look at what mlp_backward is given: this step's X and y, the H of this step's forward pass, and "
                 "the probabilities that cross_entropy returns (not the logits)")


@exercise("6.2", nudges=(
    "Evaluate on all N rows: the mean loss and the fraction of rows predicted right. Which of the course's "
    "functions give each, on the device?",
    "Two scalars come back to the host and nothing larger: how many bytes does your function copy? If it "
    "works in chunks, is the loss the mean over all rows (a partial last chunk has fewer rows than the "
    "others)?",
), more="""\
  _, logits = mlp_forward(X_d, params["W1"], params["b1"], params["W2"], params["b2"])   # all N rows at once
  loss, _ = cross_entropy(logits, y_d)        # the mean over all N
  correct = count_correct(logits, y_d)        # ties go to the first class, like np.argmax
  return float(loss.copy_to_host()[0]), int(correct.copy_to_host()[0]) / X_d.shape[0]""")
def check_evaluate(evaluate, seed=0):
    """Exercise 6.2. Domain: (loss, accuracy) of random parameters on random data, against the NumPy twin; N from
    29 to 10,007 rows on a GPU (263 in the simulator: a prime above a chunk of 256, so a mean of per-chunk means
    is wrong and a last chunk part full), logits with exact ties, a confidently wrong network (a loss from float32
    probabilities is inf there); the same data evaluated again after the parameters changed in place (as after
    each epoch: nothing cached across calls); nothing copied to the host but the two scalars; two Python floats
    back, as the spec says (not NumPy scalars)."""
    from course.update import FlatParams
    ex = "Exercise 6.2"
    rng = np.random.default_rng(seed)
    for N, n_in, hidden, ties, scale in ((37, 20, 9, True, 8), (course.pick(10_007, 263), course.pick(784, 12),
                                                               course.pick(16, 6), False, 8),
                                         (29, 20, 9, False, CONFIDENT)):
        X, y, p = _problem(rng, N, n_in, hidden)
        p["W2"] *= 8  # confident predictions, so that accuracy is far from chance and its errors show
        what = ""
        if scale == CONFIDENT:
            what = ", confidently wrong on some rows"
            _confidently_wrong(X, y, p)
        if ties:  # classes 3 and 7 get the same weights and bias: their logits are equal in every row
            p["W2"][:, 7], p["b2"][7] = p["W2"][:, 3], p["b2"][3]
            p["W2"][:, 3] += 2 * np.abs(p["W2"]).max(axis=1)  # ... and larger than the others
            p["W2"][:, 7] = p["W2"][:, 3]
            H0 = np.maximum(X @ p["W1"] + p["b1"], 0)
            lead = (H0 @ p["W2"] + p["b2"]).argmax(1) == 3
            y[lead & (np.arange(N) % 2 == 0)] = 7  # half of those rows labelled with the tied, later class
            what = ", classes 3 and 7 tied"
        params = FlatParams({k: v.shape for k, v in p.items()})
        params.copy_from_host(p)
        X_d, y_d = cuda.to_device(X), cuda.to_device(y)
        _evaluate_once(ex, f"with N={N}, {n_in}-{hidden}-10{what}", evaluate, X_d, y_d, params, X, y, p, ties)
        if ties:   # the same test set after an epoch of training: new parameters, written into the same buffer
            p = {k: (v + rng.uniform(-0.5, 0.5, v.shape) * np.abs(v).max()).astype(np.float32) for k, v in p.items()}
            params.copy_from_host(p)
            _evaluate_once(ex, f"with N={N}, {n_in}-{hidden}-10, called again on the same data after the parameters "
                           "changed in place (as after an epoch)", evaluate, X_d, y_d, params, X, y, p, False)
    return ("3 random problems (N up to thousands, tied logits, a confidently wrong network) and one evaluated again "
            "after its parameters changed: loss and accuracy match the NumPy twin, and only two scalars came back")


def _evaluate_once(ex, case, evaluate, X_d, y_d, params, X, y, p, ties):
    """Call evaluate once and fail on what it copied, its types, its accuracy and its loss, against the twin."""
    __tracebackhide__ = True
    from course.checks.loss import recorded_copies
    hint = ("look at what the mean runs over (all N rows, not a mean of means), at how a correct row is counted "
            "(the first largest logit, as np.argmax: a tie is not a hit for a later class), and at the types "
            "returned (two Python floats)")
    N = X.shape[0]
    with recorded_copies() as copies:
        got = call(ex, case, evaluate, X_d, y_d, params, hint=hint)
    big = [n for n in copies if n > 1]
    if big:
        fail(ex, case, f"evaluate copied an array of {big[0]} elements to the host ({len(copies)} copies in "
             "all): only the two scalars come back, the loss and the count of correct rows",
             "compute the loss and the count on the device (cross_entropy, count_correct) and copy those two "
             "one-element arrays")
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(ex, case, f"expected a tuple (loss, accuracy), got {got!r}", "return two Python floats")
    loss, acc = got
    H = np.maximum(X @ p["W1"] + p["b1"], 0)
    logits = H @ p["W2"] + p["b2"]
    want_acc = float(np.mean(logits.argmax(1) == y))
    want_loss = mlp_loss_ref(X, y, **p)
    if type(loss) is not float or type(acc) is not float:   # Python floats, as the spec says: no NumPy scalars
        fail(ex, case, f"got types ({type(loss).__name__}, {type(acc).__name__})",
             "copy the two device scalars to the host and convert: float(...) gives a Python float")
    if not np.isclose(acc, want_acc, atol=1e-9):
        why = ""
        if ties and np.isclose(acc, np.mean(logits[np.arange(N), y] >= logits.max(1)), atol=1e-9):
            why = ": ties counted as correct (a row whose label's logit EQUALS the max of another, earlier class)"
        fail(ex, case, f"accuracy: expected {want_acc:.4f}, got {acc:.4f}{why}",
             "accuracy is count_correct / N, a fraction in [0, 1]; " + hint)
    if not np.isclose(loss, want_loss, rtol=1e-5, atol=1e-6):
        why = (": an infinite loss is the log of a probability that underflowed to 0 in float32; "
               "cross_entropy's loss comes from the logits (log-sum-exp) and stays finite" if np.isinf(loss)
               else "")
        fail(ex, case, f"loss: expected {want_loss:.6f}, got {loss:.6f}{why}", "the mean cross-entropy over "
             "all N; " + hint)


CONFIDENT = "confident"  # the third problem: a network that is sure and wrong on some rows
CONFIDENT_GAP = 130.0    # the logit gap those rows get: exp(-130) is 0 in float32 (the smallest is ~1.4e-45)


def _confidently_wrong(X, y, p, rows=5):
    """Make the network sure and wrong on the first `rows` rows: label each with its least likely class and scale
    W2 (in place) until those logits trail the row's max by at least CONFIDENT_GAP."""
    H = np.maximum(X @ p["W1"] + p["b1"], 0)
    z = H @ p["W2"]                                              # (N, 10), before the bias
    y[:rows] = z[:rows].argmin(1)
    gap = (z[:rows].max(1) - z[:rows].min(1)).min()
    p["W2"] *= np.float32((CONFIDENT_GAP + 1) / gap)
