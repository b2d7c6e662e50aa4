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
])
def test_train_step_rejects(old, new, says):
    rejects(checks.check_train_step, mutant(T.train_step, old, new), "Exercise 6.1", says)


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


def evaluate_ties_count():
    """evaluate, counting with a count_correct_kernel where a tie with an earlier class counts as a hit."""
    kernel = mutant(L.count_correct_kernel, "if best == y[r]:", "if logits[r, y[r]] >= logits[r, best]:")
    counter = mutant(count_correct, "def count_correct(", "def count_correct(", scope={"count_correct_kernel": kernel})
    return mutant(T.evaluate, "def evaluate(", "def evaluate(", scope={"count_correct": counter})


@pytest.mark.parametrize("fn, says", [
    (evaluate_mean_of_chunk_means, ["loss: expected"]),
    (evaluate_ties_count(), ["ties counted as correct"]),
    (mutant(T.evaluate, "int(correct.copy_to_host()[0]) / X_d.shape[0]", "int(correct.copy_to_host()[0])"),
     ["got types"]),                                                     # the count, an int, not the fraction
    (mutant(T.evaluate, "float(loss.copy_to_host()[0])", "loss.copy_to_host()[0]"), ["got types"]),
    (mutant(T.evaluate, "loss, _ = cross_entropy(logits, y_d)", "loss, _ = cross_entropy(logits[:64], y_d[:64])"),
     ["loss: expected"]),
    (mutant(T.evaluate, "/ X_d.shape[0]", "/ 64"), ["accuracy: expected"]),
])
def test_evaluate_rejects(fn, says):
    rejects(checks.check_evaluate, fn, "Exercise 6.2", says)
