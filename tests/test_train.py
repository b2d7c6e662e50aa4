"""The training loop: the GPU loop against a NumPy loop of the twins from the same weights and batches; divergence;
and the command-line trainer."""
import json
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from course.data import load_mnist
from course.grad import mlp_grads_ref, mlp_loss_ref
import course.runtime.cpu
import course.train
from course.train import fit, fit_ref, fit_sim, pool
from course.update import Diverged, adam_ref, momentum_ref, sgd_ref


@pytest.fixture(scope="module")
def small():
    X_train, y_train, X_test, y_test = load_mnist()
    return pool(X_train[:48], 4), y_train[:48], pool(X_test[:20], 4), y_test[:20]  # 7x7 = 49 pixels


def numpy_loop(hist, X, y, batch_size, lr, optimizer, seed, **kw):
    """The same loop with the NumPy twins, from the same initial weights and the same permutation."""
    params = hist["params"]
    flat = hist["snapshots"][0]
    p = {name: flat[o:o + int(np.prod(s))].reshape(s).copy() for name, s, o in params.layout}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    n = (len(X) // batch_size) * batch_size
    perm = np.random.default_rng(seed).permutation(len(X))[:n]
    losses = []
    for t, k in enumerate(range(0, n, batch_size), start=1):
        idx = perm[k:k + batch_size]
        losses.append(mlp_loss_ref(X[idx], y[idx], **p))
        g = {name: v.astype(np.float32) for name, v in mlp_grads_ref(X[idx], y[idx], **p).items()}
        for name in p:
            if optimizer == "sgd":
                p[name] = sgd_ref(p[name], g[name], lr)
            elif optimizer == "momentum":
                p[name], state[name][0] = momentum_ref(p[name], g[name], state[name][0], lr, kw.get("mu", 0.9))
            else:
                p[name], state[name][0], state[name][1] = adam_ref(p[name], g[name], *state[name], t, lr)
    return np.array(losses), p


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, lr", [("sgd", 0.5), ("momentum", 0.2), ("adam", 0.01)])
def test_gpu_loop_matches_numpy_loop(small, optimizer, lr):
    X, y, Xt, yt = small
    kw = dict(hidden=5, epochs=1, batch_size=8, lr=lr, optimizer=optimizer, seed=3, log_every=1, progress=False,
              snapshot_every=2)
    hist = fit(X, y, Xt, yt, **kw)
    want, p = numpy_loop(hist, X, y, 8, lr, optimizer, seed=3)
    twin = fit_ref(X, y, Xt, yt, **kw)                                 # notebook 06's twin: the same loop
    np.testing.assert_allclose(twin["step_loss"], want, rtol=1e-12)
    assert twin["loss"] == twin["step_loss"] and twin["snapshot_steps"] == hist["snapshot_steps"] == [0, 2, 4, 6]
    for a, b in zip(twin["snapshots"], hist["snapshots"]):             # the same flat layout, padding included
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    assert twin["epoch"][0]["test_acc"] == pytest.approx(hist["epoch"][0]["test_acc"])
    assert twin["epoch"][0]["test_loss"] == pytest.approx(hist["epoch"][0]["test_loss"], rel=1e-4)
    np.testing.assert_allclose(twin["params"].flat.copy_to_host(), hist["params"].flat.copy_to_host(), rtol=1e-3,
                               atol=1e-5)
    assert len(hist["loss"]) == len(want) == 6
    # float32 kernels vs the float64 twin losses: the curves agree to ~1e-6 relative over 6 steps; 1e-4 is the bar
    np.testing.assert_allclose(hist["loss"], want, rtol=1e-4)
    got = hist["params"].to_host()
    for name in p:
        np.testing.assert_allclose(got[name], p[name], rtol=1e-3, atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_fit_stops_after_max_steps(small):
    X, y, Xt, yt = small
    hist = fit(X, y, Xt, yt, hidden=5, epochs=3, batch_size=8, log_every=1, progress=False, max_steps=2)
    assert hist["step"] == [1, 2] and len(hist["epoch"]) == 1


@pytest.mark.slow
def test_fit_sim_checks_the_kernels_against_the_twin(small, monkeypatch, capsys):
    X, y, Xt, yt = small
    kw = dict(hidden=5, epochs=1, batch_size=8, lr=0.5, seed=3, progress=False)
    hist = fit_sim(X, y, Xt, yt, kernel_steps=2, **kw)
    assert hist["kernel_steps"] == 2 and len(hist["step_loss"]) == 6
    np.testing.assert_allclose(hist["kernel_loss"], hist["step_loss"][:2], rtol=1e-4)
    assert "steps 1-2 on the course's kernels in the simulator" in capsys.readouterr().out
    right = course.train.train_step

    def wrong_step(Xb, yb, params, grads, opt, buf):  # updates twice: the second step's loss differs from the twin's
        right(Xb, yb, params, grads, opt, buf)
        return right(Xb, yb, params, grads, opt, buf)

    monkeypatch.setattr(course.train, "train_step", wrong_step)
    with pytest.raises(AssertionError, match="differ from the NumPy twin"):
        fit_sim(X, y, Xt, yt, kernel_steps=2, **kw)


@pytest.mark.slow
def test_fit_compiles_before_the_clock_and_draws_its_bars_on_stdout(small, monkeypatch, capsys):
    """an epoch's seconds exclude numba's compile (one untimed step on spare parameters first, the real
    parameters untouched by it), and tqdm's bars go to stdout, which Jupyter does not paint red."""
    X, y, Xt, yt = small
    events, right = [], course.train.train_step

    def step(Xb, yb, params, grads, opt, buf):
        events.append(params)
        return right(Xb, yb, params, grads, opt, buf)

    def clock():
        events.append("clock")
        return time.perf_counter()

    monkeypatch.setattr(course.train, "train_step", step)
    monkeypatch.setattr(course.train, "time", types.SimpleNamespace(perf_counter=clock))
    with course.runtime.cpu.running():                                       # the executor: where it compiles
        hist = fit(X, y, Xt, yt, hidden=5, epochs=1, batch_size=8, log_every=1)
    warm, trained = events[0], [e for e in events[events.index("clock"):] if e != "clock"]
    assert warm != "clock" and warm is not hist["params"], "the first step must run before the clock, on spares"
    assert len(trained) == 6 and all(p is hist["params"] for p in trained)
    out, err = capsys.readouterr()
    assert "epoch 1/1" in out and "epoch 1/1" not in err


@pytest.mark.slow
def test_divergence_stops_training_with_advice(small):
    X, y, Xt, yt = small
    with pytest.raises(Diverged, match="smaller learning rate"):
        fit(X, y, Xt, yt, hidden=5, epochs=3, batch_size=8, lr=1e4, log_every=1, progress=False)


def test_fit_refuses_a_batch_larger_than_the_data(small):
    X, y, Xt, yt = small
    with pytest.raises(ValueError, match="batch_size"):
        fit(X, y, Xt, yt, hidden=5, epochs=1, batch_size=100, progress=False)


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "course", "train", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.slow
def test_cli_quick_trains_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    r = cli("--quick", "--epochs", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-2]
    assert last.startswith("test accuracy: 0.") and len(last.split(": ")[1]) == 6
    result = json.loads(out.read_text())
    assert result["quick"] and len(result["epochs"]) == 1 and result["test_accuracy"] >= 0.80  # it learns
    assert len(result["loss_curve"]["loss"]) >= 1
