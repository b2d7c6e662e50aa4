"""The public launchers on bad inputs (issue "Reliability"): outputs that alias inputs are refused; numbers that
float32 cannot hold are refused; reused work buffers follow every shape; the documented contracts (labels, NaN
rows, gather's indices, Adam's v) hold."""
import numpy as np
import pytest
from numba import cuda

import course
from course import forward as F
from course import grad as G
from course import loss as L
from course import update as U
from course.gather import gather, gather_labels
from course.scale import scale
from course.runtime.util import require_apart

rng = np.random.default_rng(0)


def dev(*shape, dtype=np.float32):
    return cuda.to_device(rng.standard_normal(shape).astype(dtype))


def labels(n, high=10, dtype=np.int64):
    return cuda.to_device(rng.integers(0, high, n).astype(dtype))


def alias_cases():
    """(name, call) pairs: every launcher, called with an output over one of its inputs (shapes chosen to pass
    every other check)."""
    X, W, b, A, B = dev(5, 5), dev(5, 5), dev(5), dev(6, 6), dev(6, 6)
    idx = cuda.to_device(np.array([4, 0, 2, 1, 3], np.int64))
    y, logits, x = labels(5), dev(5, 10), dev(7)
    f32 = cuda.to_device(np.zeros(32, np.float32))
    p, g = dev(9), dev(9)
    H, probs, W2 = dev(5, 4), dev(5, 10), dev(4, 10)
    grads = dict(W1=dev(5, 4), b1=dev(4), W2=dev(4, 10), b2=dev(10))
    y32 = labels(5, dtype=np.int32)
    return [
        ("scale", lambda: scale(f32.view(np.uint8)[:32], out=f32)),  # the pixels are the first bytes of out
        ("gather", lambda: gather(X, idx, out=X)),
        ("gather_labels", lambda: gather_labels(y, idx, out=y)),
        ("gather_labels idx", lambda: gather_labels(y, idx, out=idx)),
        ("matmul A", lambda: F.matmul(A, B, out=A)),
        ("matmul B", lambda: F.matmul(A, B, out=B)),
        ("linear X", lambda: F.linear(X, W, b, out=X)),
        ("linear W", lambda: F.linear(X, W, b, out=W)),
        ("batch_mean", lambda: L.batch_mean(x, out=x[:1])),
        ("cross_entropy probs", lambda: L.cross_entropy(logits, y, probs=logits)),
        ("cross_entropy loss", lambda: L.cross_entropy(logits, y, losses=x[:5], loss=x[2:3])),
        ("count_correct", lambda: L.count_correct(logits, y32, out=y32[:1])),
        ("column_sums", lambda: G.column_sums(A, A[0])),
        ("matmul_tn", lambda: G.matmul_tn(A, B, B)),
        ("mlp_backward W2", lambda: G.mlp_backward(X[:, :5], y, H, probs, W2, dict(grads, W2=W2))),
        ("mlp_backward work", lambda: G.mlp_backward(X[:, :5], y, H, probs, W2, grads, work=dict(dZ2=dev(5, 10),
                                                                                               dZ1=H))),
        ("mlp_backward grads", lambda: G.mlp_backward(X, y, H, probs, W2, dict(grads, b1=grads["W1"][0]))),
        ("sgd", lambda: U.sgd(p, p, 0.1)),
        ("momentum", lambda: U.momentum(p, g, g, 0.1)),
        ("adam m", lambda: U.adam(p, g, g, dev(9), 1)),
        ("adam v", lambda: U.adam(p, g, dev(9), p, 1)),
    ]


@pytest.mark.parametrize("name, call", alias_cases(), ids=[c[0] for c in alias_cases()])
def test_an_output_over_an_input_is_refused(name, call):
    with pytest.raises(ValueError, match="share memory") as e:
        call()
    assert "\n" not in str(e.value)


def test_neighbours_in_one_buffer_are_not_an_alias():
    buf = cuda.to_device(np.arange(20, dtype=np.float32))
    require_apart({"out": buf[10:]}, x=buf[:10])  # adjacent, not overlapping
    with pytest.raises(ValueError, match="out and x share memory: an output must not overlap an input"):
        require_apart({"out": buf[9:]}, x=buf[:10])
    with pytest.raises(ValueError, match="b and a share memory: an output must not overlap another output"):
        require_apart({"a": buf[:10], "b": buf[5:15]}, x=buf[15:])
    require_apart({"out": buf[:0]}, x=buf)      # an empty array holds no memory


def test_separate_outputs_still_work():
    X, W, b = dev(5, 5), dev(5, 5), dev(5)
    Y = F.linear(X, W, b, out=cuda.device_array((5, 5), np.float32))
    np.testing.assert_allclose(Y.copy_to_host(), F.linear_ref(X.copy_to_host(), W.copy_to_host(), b.copy_to_host()),
                               rtol=1e-5, atol=1e-5)  # float32 sums of 5 terms


@pytest.mark.parametrize("kw, says", [
    (dict(lr=1e39), "in float32"),     # inf in float32: every parameter would become inf
    (dict(lr=1e-50), "in float32"),    # 0 in float32: a step that does nothing
    (dict(lr=10**400), "must be a number"),
])
def test_sgd_refuses_a_learning_rate_float32_cannot_hold(kw, says):
    with pytest.raises(ValueError, match=says):
        U.sgd(dev(9), dev(9), **kw)


def test_adam_eps_and_betas_are_checked_after_rounding():
    p, g, m, v = dev(9), dev(9), cuda.to_device(np.zeros(9, np.float32)), cuda.to_device(np.zeros(9, np.float32))
    with pytest.raises(ValueError, match="eps.*in float32"):
        U.adam(p, g, m, v, 1, eps=1e-50)
    with pytest.raises(ValueError, match="beta2.*in float32"):
        U.adam(p, g, m, v, 1, beta2=1 - 1e-10)  # 1.0 in float32


@pytest.mark.parametrize("t", [10**400, 2**53 + 1, True, 0, 1.0], ids=["10**400", "2**53+1", "True", "0", "1.0"])
def test_adam_step_number_is_checked_in_one_line(t):
    p, g, m, v = dev(9), dev(9), cuda.to_device(np.zeros(9, np.float32)), cuda.to_device(np.zeros(9, np.float32))
    with pytest.raises(ValueError, match="step number") as e:
        U.adam(p, g, m, v, t)
    assert len(str(e.value)) < 120


def test_adam_with_a_negative_second_moment_never_gives_finite_numbers():
    """Documented: v < 0 is the caller's bug, unchecked; the sqrt of it is NaN on a GPU, ValueError here."""
    p, g, m = dev(9), dev(9), cuda.to_device(np.zeros(9, np.float32))
    v = cuda.to_device(-np.ones(9, np.float32))
    try:
        U.adam(p, g, m, v, 1)
    except ValueError as e:
        assert course.SIMULATOR and "math domain error" in str(e)
    else:
        assert np.isnan(p.copy_to_host()).all()


def backward(X, y, W1, b1, W2, b2, work):
    H, logits = F.mlp_forward(X, W1, b1, W2, b2)
    _, probs = L.cross_entropy(logits, y)
    grads = {k: cuda.device_array(a.shape, np.float32) for k, a in dict(W1=W1, b1=b1, W2=W2, b2=b2).items()}
    return G.mlp_backward(X, y, H, probs, W2, grads, work=work)


def test_work_buffers_follow_the_hidden_size():
    """The same work dict with a new hidden size (same batch): dZ1 is remade, the gradients are right."""
    work = {}
    X, y = dev(6, 8), labels(6)
    for hidden in (7, 5, 9):
        p = dict(W1=dev(8, hidden), b1=dev(hidden), W2=dev(hidden, 10), b2=dev(10))
        got = backward(X, y, **p, work=work)
        want = G.mlp_grads_ref(X.copy_to_host(), y.copy_to_host(), **{k: a.copy_to_host() for k, a in p.items()})
        assert work["dZ1"].shape == (6, hidden)
        for k in want:  # float32 kernels vs the float64 twin
            np.testing.assert_allclose(got[k].copy_to_host(), want[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("grads, says", [
    (None, "NoneType"),
    ("W1 W2", "str"),
    ({"W1": 0, "b1": 0, "W2": 0}, r"\['W1', 'W2', 'b1'\]"),
])
def test_mlp_backward_grads_must_hold_the_four_arrays(grads, says):
    X, y, H, probs, W2 = dev(4, 6), labels(4), dev(4, 3), dev(4, 10), dev(3, 10)
    with pytest.raises(ValueError, match=f"grads must be a dict.*{says}"):
        G.mlp_backward(X, y, H, probs, W2, grads)


def test_a_bad_label_shows_as_a_nan_loss_before_the_backward_pass():
    """Decided: mlp_backward does not read the labels on the host (a copy each step); a label outside [0, 10)
    gives a finite wrong gradient there, but cross_entropy, which every step runs first, gives a NaN loss."""
    X, W1, b1, W2, b2 = dev(4, 6), dev(6, 3), dev(3), dev(3, 10), dev(10)
    y = cuda.to_device(np.array([1, 10, 3, 2], np.int64))
    H, logits = F.mlp_forward(X, W1, b1, W2, b2)
    loss, probs = L.cross_entropy(logits, y)
    assert np.isnan(loss.copy_to_host()[0])
    with pytest.raises(U.Diverged):
        U.check_loss(1, loss.copy_to_host()[0], 0.1)


def test_a_nan_logit_is_reported_by_the_loss_not_by_the_count():
    """Decided: count_correct keeps its `>` comparison (a NaN never wins, unlike np.argmax's first NaN); rows with
    NaN mean training diverged, which the loss reports. Rows without NaN agree with the reference."""
    logits = rng.standard_normal((6, 10)).astype(np.float32)
    logits[2, 0], logits[4, 7] = np.nan, np.nan
    y = rng.integers(0, 10, 6)
    clean = np.delete(np.arange(6), [2, 4])
    got = L.count_correct(cuda.to_device(logits[clean]), cuda.to_device(y[clean])).copy_to_host()[0]
    assert got == L.count_correct_ref(logits[clean], y[clean])
    loss, _ = L.cross_entropy(cuda.to_device(logits), cuda.to_device(y))
    assert np.isnan(loss.copy_to_host()[0])


@pytest.mark.skipif(not course.SIMULATOR, reason="an index outside X is an illegal address on a GPU: it would "
                                                  "poison this process's CUDA context")
def test_gather_indices_are_the_callers_job_as_documented():
    X = dev(5, 3)
    assert "NOT checked" in gather.__doc__ and "IndexError" in gather.__doc__ and "-1" in gather.__doc__
    with pytest.raises(IndexError):
        gather(X, cuda.to_device(np.array([0, 5], np.int64)))
    with pytest.raises(IndexError, match="index -1 is negative"):  # not the last row, NumPy's rule
        gather(X, cuda.to_device(np.array([-1], np.int64)))


# --- grids a GPU would refuse: more than 65,535 blocks in y ----------------------------------------------------

def test_grid2d_refuses_more_blocks_in_y_than_a_gpu_has():
    from course.runtime.util import MAX_GRID_Y, grid2d
    assert grid2d(5, MAX_GRID_Y * 8, (32, 8)) == (1, MAX_GRID_Y)
    with pytest.raises(ValueError, match="65,536 blocks of 8 rows in y, more than a GPU's 65,535"):
        grid2d(5, MAX_GRID_Y * 8 + 1, (32, 8))


@pytest.mark.parametrize("rows, call", [
    (65_535 * 16 + 1, lambda d, r: F.linear(d(np.ones((r, 1), np.float32)), d(np.ones((1, 1), np.float32)),
                                            d(np.zeros(1, np.float32)))),
    (65_535 * 8 + 1, lambda d, r: gather(d(np.ones((4, 1), np.float32)), d(np.zeros(r, np.int32)))),
])
def test_launchers_refuse_more_rows_than_a_grid_holds(rows, call):
    """linear: blocks of 16 rows; gather: blocks of 8 rows. One row fewer per block would be the most a grid holds."""
    with pytest.raises(ValueError, match="more than a GPU's 65,535: split the rows"):
        call(cuda.to_device, rows)
