"""Notebook 06's checks (the training step, the evaluation pass) pass the solutions and reject planted wrong
answers, most of them one-line mutations of the solution (tests/conftest.py: mutant)."""
import numpy as np
import pytest
from conftest import mutant, rejects

from course import loss as L
from course import train as T
from course.checks import train as checks
from course.loss import count_correct, cross_entropy
from course.forward import mlp_forward


def test_solutions_pass(capsys):
    checks.check_train_step(T.train_step)
    checks.check_evaluate(T.evaluate)
    out = capsys.readouterr().out
    assert "✓ Exercise 6.1 passed" in out and "✓ Exercise 6.2 passed" in out


@pytest.mark.parametrize("old, new, says", [
    ("opt.step(grads)", "SGD(params, opt.lr).step(grads)", ["expected", "after the step"]),     # ignores opt
    ("opt.step(grads)", "opt.step(grads); float(loss.copy_to_host()[0])", ["copied an array to the host"]),
    ('H=buf["H"], logits=buf["logits"]', "", ["allocated a new device array"]),                # ignores buf
    ('probs=buf["probs"], losses=buf["losses"], loss=buf["loss"]', "", ["allocated a new device array"]),
    ("opt.step(grads)", "pass", ["did not change"]),
    ("    return loss", "    return float(loss.copy_to_host()[0])", ["copied an array to the host"]),
    ("mlp_backward(Xb, yb, H, probs", "mlp_backward(Xb, yb, H, probs * 2", ["raised", "expected"]),
    # the logits where the probabilities belong: the gradient is what the message names
    ("mlp_backward(Xb, yb, H, probs", "mlp_backward(Xb, yb, H, logits", ["the gradient d"]),
])
def test_train_step_rejects(old, new, says):
    msg = rejects(checks.check_train_step, mutant(T.train_step, old, new), "Exercise 6.1", says)
    assert "_HostCopy" not in msg, msg  # the trap says what happened, not its own name


# Kept as a hand-written function: a chunked evaluation is another design, not an edit of the solution (which
# evaluates every row in one pass), and its bug (a mean of chunk means) exists only in that design.
def evaluate_mean_of_chunk_means(X_d, y_d, params, chunk=64):
    losses, correct = [], 0
    for k in range(0, X_d.shape[0], chunk):
        _, logits = mlp_forward(X_d[k:k + chunk], params["W1"], params["b1"], params["W2"], params["b2"])
        loss, _ = cross_entropy(logits, y_d[k:k + chunk])
        losses.append(float(loss.copy_to_host()[0]))
        correct += int(count_correct(logits, y_d[k:k + chunk]).copy_to_host()[0])
    return float(np.mean(losses)), correct / X_d.shape[0]  # the last, short chunk weighs as much as a full one


def evaluate_chunks_of(chunk):
    """The mean of chunk means with chunks of `chunk` rows: right only when every chunk is full."""
    return lambda X_d, y_d, params: evaluate_mean_of_chunk_means(X_d, y_d, params, chunk)


def evaluate_loss_on_the_host(X_d, y_d, params):
    """The loss as mean(-log p) of float32 probabilities copied back: inf for a confidently wrong row."""
    _, logits = mlp_forward(X_d, params["W1"], params["b1"], params["W2"], params["b2"])
    _, probs = cross_entropy(logits, y_d)
    p = probs.copy_to_host()                                     # (N, 10): more than two scalars come back
    y = y_d.copy_to_host()
    with np.errstate(divide="ignore"):
        loss = float(np.mean(-np.log(p[np.arange(len(y)), y])))
    return loss, int(count_correct(logits, y_d).copy_to_host()[0]) / X_d.shape[0]


def evaluate_ties_count():
    """evaluate, counting with a count_correct_kernel where a tie with an earlier class counts as a hit."""
    kernel = mutant(L.count_correct_kernel, "if best == y[r]:", "if logits[r, y[r]] >= logits[r, best]:")
    counter = mutant(count_correct, "def count_correct(", "def count_correct(", scope={"count_correct_kernel": kernel})
    return mutant(T.evaluate, "def evaluate(", "def evaluate(", scope={"count_correct": counter})


@pytest.mark.parametrize("fn, says", [
    (evaluate_mean_of_chunk_means, ["loss: expected"]),  # chunks of 64
    (evaluate_ties_count(), ["ties counted as correct"]),
    (mutant(T.evaluate, "int(correct.copy_to_host()[0]) / X_d.shape[0]", "int(correct.copy_to_host()[0])"),
     ["got types"]),                                                     # the count, an int, not the fraction
    (mutant(T.evaluate, "float(loss.copy_to_host()[0])", "loss.copy_to_host()[0]"), ["got types"]),
    (mutant(T.evaluate, "loss, _ = cross_entropy(logits, y_d)", "loss, _ = cross_entropy(logits[:64], y_d[:64])"),
     ["loss: expected"]),
    (mutant(T.evaluate, "/ X_d.shape[0]", "/ 64"), ["accuracy: expected"]),
    # more rows than a chunk, a partial last chunk: at the simulator's sizes too
    (evaluate_chunks_of(100), ["loss: expected"]),
    # two scalars come back, nothing larger
    (evaluate_loss_on_the_host, ["copied an array of"]),
    (mutant(T.evaluate, "    return float(", "    logits.copy_to_host()\n    return float("), ["copied an array of"]),
])
def test_evaluate_rejects(fn, says):
    rejects(checks.check_evaluate, fn, "Exercise 6.2", says)


def test_the_confidently_wrong_network_makes_a_host_loss_infinite(monkeypatch):
    # without the copy trap, the loss from float32 probabilities is what fails: inf, named as such
    from course.checks import loss as checks_loss
    monkeypatch.setattr(checks_loss, "recorded_copies", _no_record)
    rejects(checks.check_evaluate, evaluate_loss_on_the_host, "Exercise 6.2", ["underflowed to 0"])


class _no_record:
    def __enter__(self):
        return []

    def __exit__(self, *exc):
        return False


# --- batches above the notebook's, data the course evaluates again, the types the spec names -----------

def test_train_step_with_the_notebooks_batch_hard_coded_is_rejected():
    wrong = mutant(T.train_step, "mlp_forward(Xb,", "mlp_forward(Xb[:64],")   # the notebook's batch_size
    rejects(checks.check_train_step, wrong, "Exercise 6.1", ["raised", "expected"])


_SEEN = {}


def evaluate_cached_by_data(X_d, y_d, params):
    """Right once, then the first answer again for the same data: the course evaluates the same test set after
    every epoch, with new parameters."""
    key = (X_d.shape, float(X_d[:1, :1].copy_to_host()[0, 0]))
    if key not in _SEEN:
        _SEEN[key] = T.evaluate(X_d, y_d, params)
    return _SEEN[key]


@pytest.mark.parametrize("fn, says", [
    pytest.param(evaluate_chunks_of(256), ["loss: expected"], id="a mean of 256-row chunk means"),
    pytest.param(mutant(T.evaluate, "float(loss.copy_to_host()[0])", "np.float64(loss.copy_to_host()[0])",
                        scope={"np": np}), ["got types"], id="a NumPy float"),
    pytest.param(evaluate_cached_by_data, ["expected"], id="cached across calls"),
])
def test_evaluate_rejects_issue48(fn, says):
    _SEEN.clear()
    rejects(checks.check_evaluate, fn, "Exercise 6.2", says)
