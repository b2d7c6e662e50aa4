"""course.runtime.cpu, the CPU executor: every kernel that training uses gives the NumPy references' results (and the
simulator's) at odd sizes and several launch shapes; barriers inside loops; what it refuses, and the note it gives."""
import os
import sys
import types

import numpy as np
import pytest
from numba import cuda, float32

import course
from course.runtime import cpu, mine, registry
from course.data import load_mnist
from course.forward import TILE, linear_ref, matmul, matmul_v2_kernel
from course.gather import gather, gather_labels, gather_ref
from course.grad import COLS, LANES, colsum_kernel, mlp_backward, mlp_grads_ref
from course.loss import count_correct, count_correct_ref, cross_entropy, softmax_xent_ref, sum_kernel
from course.scale import scale, scale_ref
from course.tools import nbtools
from course.train import fit, fit_ref, pool
from course.update import adam, adam_ref, momentum, momentum_ref, sgd, sgd_ref
from simulated_student import simulate_student

pytestmark = pytest.mark.skipif(not course.SIMULATOR, reason="the executor runs where there is no GPU")

# float32 tolerances: a dot product of K terms summed in another order than NumPy's differs by ~sqrt(K) ulps of its
# largest terms: errors are measured relative to the largest value of the result (as notebook 15 does)
REL = 1e-5
SIZES = [(1, 1, 1), (3, 17, 5), (37, 50, 21), (64, 784, 33)]   # (rows, inner, columns): none a multiple of 16


@pytest.fixture
def executor():
    """Launches run on the executor inside the test."""
    with cpu.running():
        yield


def close(got, want, rel=REL):
    """Assert got equals want to rel times the largest |want| (at least 1)."""
    err = np.max(np.abs(np.asarray(got, np.float64) - want)) if np.size(want) else 0.0
    assert err <= rel * max(1.0, np.max(np.abs(want))), f"max error {err:.3g}"


def rng(seed=0):
    return np.random.default_rng(seed)


def d(a):
    return cuda.to_device(np.ascontiguousarray(a))


def launchers_match_references(seed=0):
    """The course's launchers (which call whatever kernels course.* holds now) against the NumPy references."""
    r = rng(seed)
    for M, K, N in SIZES:
        A, B = r.standard_normal((M, K)).astype(np.float32), r.standard_normal((K, N)).astype(np.float32)
        b = r.standard_normal(N).astype(np.float32)
        for version in ("v1", "v2"):
            close(matmul(d(A), d(B), version=version).copy_to_host(), A.astype(np.float64) @ B)
        from course.forward import linear
        close(linear(d(A), d(B), d(b), relu=True).copy_to_host(), linear_ref(A.astype(np.float64), B, b, True))
        x = r.integers(0, 256, (M, K)).astype(np.uint8)
        np.testing.assert_array_equal(scale(d(x)).copy_to_host(), scale_ref(x))
        idx = r.integers(0, M, 2 * M + 1)
        np.testing.assert_array_equal(gather(d(A), d(idx)).copy_to_host(), gather_ref(A, idx))
        labels = r.integers(0, 10, M)
        np.testing.assert_array_equal(gather_labels(d(labels), d(idx)).copy_to_host(), labels[idx])
    for B, C in ((1, 10), (37, 10), (300, 7), (1001, 10)):
        logits, y = (r.standard_normal((B, C)) * 3).astype(np.float32), r.integers(0, C, B)
        loss, probs = cross_entropy(d(logits), d(y))
        want_loss, want_probs = softmax_xent_ref(logits, y)
        np.testing.assert_allclose(probs.copy_to_host(), want_probs, atol=1e-6)
        assert abs(loss.copy_to_host()[0] - want_loss) < 1e-5 * max(1.0, want_loss)
        assert int(count_correct(d(logits), d(y)).copy_to_host()[0]) == count_correct_ref(logits, y)
    backward_matches(r)
    updates_match(r)


def backward_matches(r):
    """mlp_backward's four gradients against the float64 twin, at an odd batch and hidden size."""
    from course.update import FlatParams
    B, n_in, hidden = 37, 49, 19
    X, y = r.random((B, n_in)).astype(np.float32), r.integers(0, 10, B)
    W1 = (r.standard_normal((n_in, hidden)) * 0.3).astype(np.float32)
    b1 = (r.standard_normal(hidden) * 0.1).astype(np.float32)
    W2 = (r.standard_normal((hidden, 10)) * 0.3).astype(np.float32)
    b2 = (r.standard_normal(10) * 0.1).astype(np.float32)
    H = np.maximum(X @ W1 + b1, 0).astype(np.float32)
    _, probs = softmax_xent_ref(H @ W2 + b2, y)
    grads = FlatParams({"W1": W1.shape, "b1": b1.shape, "W2": W2.shape, "b2": b2.shape})
    mlp_backward(d(X), d(y), d(H), d(probs), d(W2), grads)
    want = mlp_grads_ref(X, y, W1, b1, W2, b2)
    for k, v in grads.to_host().items():
        np.testing.assert_allclose(v, want[k], atol=1e-5, err_msg=k)


def updates_match(r):
    """SGD, momentum and Adam in place against their NumPy twins, at a size that is not a multiple of 256."""
    n = 1000
    p, g, v, m = (r.standard_normal(n).astype(np.float32) for _ in range(4))
    v2 = np.abs(v)
    pd = d(p)
    sgd(pd, d(g), 0.1)
    np.testing.assert_allclose(pd.copy_to_host(), sgd_ref(p, g, 0.1), 1e-6, 1e-6)
    pd, vd = d(p), d(v)
    momentum(pd, d(g), vd, 0.1, 0.9)
    want_p, want_v = momentum_ref(p, g, v, 0.1, 0.9)
    np.testing.assert_allclose(pd.copy_to_host(), want_p, 1e-6, 1e-6)
    np.testing.assert_allclose(vd.copy_to_host(), want_v, 1e-6, 1e-6)
    pd, md, vd = d(p), d(m), d(v2)
    adam(pd, d(g), md, vd, 3, 1e-3)
    want_p, want_m, want_v = adam_ref(p, g, m, v2, 3, 1e-3)
    np.testing.assert_allclose(pd.copy_to_host(), want_p, 1e-6, 1e-6)
    np.testing.assert_allclose(md.copy_to_host(), want_m, 1e-6, 1e-6)
    np.testing.assert_allclose(vd.copy_to_host(), want_v, 1e-6, 1e-6)


def test_the_course_kernels_match_the_references(executor):
    launchers_match_references()


def test_launches_go_to_the_executor(executor):
    """A launch inside running() is compiled (it appears in the executor's cache), not simulated."""
    x = rng().integers(0, 256, 77).astype(np.uint8)
    scale(d(x))
    assert any(py.__name__ == "scale_kernel" for py, *_ in cpu._cache)


def run_both(kernel, grid, block, host_args, outputs):
    """Launch on the executor and in the simulator on copies of the same arrays; return both outputs."""
    got = []
    for ctx in (cpu.running, cpu.simulating):
        arrays = [d(a) if isinstance(a, np.ndarray) else a for a in host_args]
        with ctx():
            kernel[grid, block](*arrays)
        got.append([arrays[i].copy_to_host() for i in outputs])
    return got


@pytest.mark.parametrize("n, block", [(1, 32), (1001, 256), (1000, 96), (77, 1000), (1500, 1024)])
def test_block_sum_with_barriers_in_its_halving_loop(n, block):
    """sum_kernel: a tree in shared memory, one barrier per halving step (a while loop), any block size."""
    x = rng(n).standard_normal(n).astype(np.float32)
    grid = (n + block - 1) // block
    (ex,), (sim,) = run_both(sum_kernel, grid, block, [x, np.zeros(1, np.float32)], [1])
    np.testing.assert_allclose(ex, [x.astype(np.float64).sum()], atol=1e-4 * np.sqrt(n))
    np.testing.assert_array_equal(ex, sim)  # same order of additions: the same float32 sum


@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (17, 33, 5), (40, 100, 47)])
def test_tiled_matmul_with_barriers_in_its_tile_loop(M, K, N):
    """matmul_v2: a device function (tile_dot) with two barriers inside its loop over tiles, inlined."""
    r = rng(K)
    A, B = r.standard_normal((M, K)).astype(np.float32), r.standard_normal((K, N)).astype(np.float32)
    grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    (ex,), (sim,) = run_both(matmul_v2_kernel, grid, (TILE, TILE), [A, B, np.zeros((M, N), np.float32)], [2])
    close(ex, A.astype(np.float64) @ B)
    np.testing.assert_allclose(ex, sim, 1e-6, 1e-6)


@pytest.mark.parametrize("rows, cols", [(1, 1), (37, 33), (200, 70)])
def test_column_sums_with_a_2d_block(rows, cols):
    """colsum_kernel: (32, 8) blocks, lanes striding over rows, then a halving loop with barriers over y."""
    A = rng(rows).standard_normal((rows, cols)).astype(np.float32)
    (ex,), (sim,) = run_both(colsum_kernel, (cols + COLS - 1) // COLS, (COLS, LANES),
                             [A, np.zeros(cols, np.float32)], [1])
    close(ex, A.astype(np.float64).sum(axis=0))
    np.testing.assert_array_equal(ex, sim)


@cuda.jit(device=True)
def relu_or_zero(x):
    """A device function without barriers and with an early return: compiled beside the kernel."""
    if x > 0:
        return x
    return float32(0.0)


@cuda.jit
def early_return_kernel(x, out, n):
    """A thread past the end returns at once; n is reassigned (a parameter the kernel writes)."""
    i = cuda.grid(1)
    if i >= n:
        return
    n = n - i
    out[i] = relu_or_zero(x[i]) + float32(n)


def test_early_return_device_function_and_reassigned_parameter(executor):
    x = rng().standard_normal(50).astype(np.float32)
    out = d(np.full(64, -1.0, np.float32))
    early_return_kernel[2, 32](d(x), out, 50)
    want = np.maximum(x, 0) + (50 - np.arange(50))
    np.testing.assert_allclose(out.copy_to_host()[:50], want, 1e-6)
    assert np.all(out.copy_to_host()[50:] == -1)


@cuda.jit
def divergent_barrier_kernel(out):
    """Half the threads wait at a barrier the other half never reach: undefined on a GPU."""
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    out[t] = t


def test_a_divergent_barrier_raises(executor):
    with pytest.raises(RuntimeError, match="disagree"):
        divergent_barrier_kernel[1, 32](d(np.zeros(32, np.float32)))


@cuda.jit
def unguarded_kernel(x, out):
    """No bounds guard: the last block's threads read past the end of x."""
    i = cuda.grid(1)
    out[i] = x[i]


def test_out_of_bounds_raises_index_error(executor):
    """numba's compiled code says only 'index is out of bounds'; the executor runs the failing
    block again as Python, which names the kernel, the line, the block, the thread, the index and the size."""
    line = unguarded_kernel.py_func.__code__.co_firstlineno + 4
    with pytest.raises(IndexError) as e:
        unguarded_kernel[2, 32](d(np.zeros(40, np.float32)), d(np.zeros(64, np.float32)))
    assert str(e.value) == (f"unguarded_kernel, line {line}, block 1, thread 8: index 40 is out of bounds for axis "
                            "0 with size 40")


@cuda.jit(device=True)
def _read(x, i):
    return x[i]


@cuda.jit
def read_through_a_device_function(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _read(x, i)


def test_out_of_bounds_in_a_device_function_names_it(executor):
    line = _read.py_func.__code__.co_firstlineno + 2
    with pytest.raises(IndexError) as e:
        read_through_a_device_function[1, 32](d(np.ones(8, np.float32)), d(np.ones(32, np.float32)))
    assert str(e.value) == (f"read_through_a_device_function, line {line} of _read, block 0, thread 8: index 8 is "
                            "out of bounds for axis 0 with size 8")


@cuda.jit
def shift_kernel(a, out):
    """An off-by-one: thread 0 writes out[-1], which NumPy's rule (and numba's) wraps to the last element."""
    i = cuda.grid(1)
    if i < out.size:
        out[i - 1] = a[i]


def test_a_negative_index_is_out_of_bounds_on_the_executor_and_in_the_simulator():
    """both refused it as out of bounds instead of writing the array's last element."""
    line = shift_kernel.py_func.__code__.co_firstlineno + 5
    says = "index -1 is negative: out of bounds"
    for where, prefix in ((cpu.running, f"shift_kernel, line {line}, block 0, thread 0: "),
                          (cpu.simulating, "tid=[0, 0, 0] ctaid=[0, 0, 0]: ")):
        out = d(np.zeros(8))
        with where(), pytest.raises(IndexError) as e:
            shift_kernel[1, 8](d(np.arange(8.0)), out)
        assert str(e.value).startswith(prefix + says), str(e.value)
        assert out.copy_to_host()[-1] == 0
    ok = d(np.zeros(8))
    with cpu.running():
        early_return_kernel[1, 8](d(np.ones(8, np.float32)), ok, 8)  # indices from 0 up: unchanged
    np.testing.assert_array_equal(ok.copy_to_host(), 1 + 8 - np.arange(8))


@cuda.jit
def wait_kernel(flag, out):
    """A thread waiting for something that never happens: nothing sets flag[0]."""
    i = cuda.grid(1)
    while flag[0] == 0:
        pass
    out[i] = 1.0


@cuda.jit
def ones_kernel(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1.0


def test_a_kernel_that_never_ends_stops_at_the_deadline_in_one_line(executor, monkeypatch):
    """numba's compiled loops poll the clock (cpu._Guard); the simulator's deadline applies."""
    import time
    from course.runtime import device
    flag, out = d(np.zeros(1, np.int32)), d(np.zeros(64, np.float32))
    ones_kernel[1, 32](out)                       # compiled before the clock starts
    wait_kernel[1, 32](d(np.ones(1, np.int32)), out)
    monkeypatch.setenv(device.DEADLINE_ENV, "1")
    for launch in (lambda: wait_kernel[2, 32](flag, out), lambda: ones_kernel[2**31 - 1, 1024](out)):
        t0 = time.perf_counter()
        with pytest.raises(device.LaunchDeadline) as e:
            launch()
        assert time.perf_counter() - t0 < 1 + 5.0  # + a loaded machine's slack
        assert "ran for more than 1 s on the CPU executor" in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("ones_kernel ran")
    ones_kernel[2, 32](out)
    assert out.copy_to_host().sum() == 64


def test_a_ctrl_c_stops_a_launch_on_the_executor(executor):
    """a Ctrl-C during a launch that never ends stops it, in one line naming the kernel."""
    import signal
    import threading
    import time
    flag, out = d(np.zeros(1, np.int32)), d(np.zeros(64, np.float32))
    wait_kernel[1, 32](d(np.ones(1, np.int32)), out)  # compiled first
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt, match="^wait_kernel was interrupted \\(Ctrl-C\\) on the CPU executor$"):
        wait_kernel[2, 32](flag, out)
    assert time.perf_counter() - t0 < 0.5 + 5.0  # not at the launch's deadline (120 s)
    timer.join()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    ones_kernel[2, 32](out)
    assert out.copy_to_host().sum() == 64


@cuda.jit
def local_across_barrier_kernel(out):
    """A local array written before a barrier and read after it, in a loop: one row per thread on the executor."""
    a = cuda.local.array(2, float32)
    t = cuda.threadIdx.x
    a[0] = float32(t)
    for k in range(3):
        cuda.syncthreads()
        a[1] = a[0] + float32(k)
    out[t] = a[1] * float32(2)


def test_a_local_array_alive_across_barriers(executor):
    out = d(np.zeros(8, np.float32))
    local_across_barrier_kernel[1, 8](out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * (np.arange(8) + 2))


@cuda.jit
def dynamic_shared_kernel(out):
    """Dynamic shared memory (its size is the launch's 4th argument): the executor does not run it."""
    s = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    s[t] = float32(t)
    cuda.syncthreads()
    out[t] = s[7 - t]


def test_an_unsupported_kernel_falls_back_to_the_simulator_with_a_note(executor, capsys):
    out = d(np.zeros(8, np.float32))
    dynamic_shared_kernel[1, 8, 0, 32](out)
    np.testing.assert_array_equal(out.copy_to_host(), 7 - np.arange(8))  # the simulator ran it, correctly
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "dynamic_shared_kernel runs in the simulator" in err[0] and "dynamic shared memory" in err[0], err
    dynamic_shared_kernel[1, 8, 0, 32](out)
    assert capsys.readouterr().err == ""  # said once per kernel


def dynamic_shared_copy():
    """A new kernel function of dynamic_shared_kernel's code each call, as a factory makes one (10's
    rounds_kernel(barrier)): the executor cannot run it (dynamic shared memory)."""
    py = dynamic_shared_kernel.py_func
    return cuda.jit(types.FunctionType(py.__code__, py.__globals__, "shared_copy_kernel"))


def test_copies_of_one_unsupported_kernel_say_so_once(executor, capsys):
    """10's barrier demo compiles its rounds kernel twice (two barriers): one note, not two."""
    out = d(np.zeros(8, np.float32))
    for _ in range(2):
        dynamic_shared_copy()[1, 8, 0, 32](out)
        np.testing.assert_array_equal(out.copy_to_host(), 7 - np.arange(8))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shared_copy_kernel runs in the simulator" in err[0], err


def test_the_checks_run_in_the_simulator(executor):
    from course.checks.core import simulated
    from course.checks.data import check_scale_kernel
    from course.scale import scale_kernel
    assert cpu.active()
    with simulated():
        assert not cpu.active()
    assert cpu.active()
    check_scale_kernel(scale_kernel)


def test_timings_on_the_executor_say_so(executor, capsys):
    from course.runtime import timing
    assert timing.label("one step") == f"one step ({timing.CPU_NOTE})"
    timing.sim_note()
    assert timing.CPU_NOTE in capsys.readouterr().out
    with cpu.simulating():
        assert timing.label("one step") == f"one step ({timing.SIM_NOTE})"


def tiny():
    X, y, Xt, yt = load_mnist()
    return pool(X[:640], 4), y[:640], pool(Xt[:200], 4), yt[:200]


@pytest.mark.slow
def test_fit_on_the_executor_equals_the_numpy_twin(executor):
    """notebook 06's fit, every kernel on the executor: the same losses, step by step, as the NumPy twin."""
    X, y, Xt, yt = tiny()
    kw = dict(hidden=16, epochs=1, batch_size=32, lr=0.1, progress=False, log_every=1)
    got = fit(X, y, Xt, yt, **kw)
    want = fit_ref(X, y, Xt, yt, **kw)
    np.testing.assert_allclose(got["loss"], want["step_loss"], rtol=1e-4, atol=1e-5)
    assert abs(got["epoch"][0]["test_acc"] - want["epoch"][0]["test_acc"]) <= 1 / len(yt)


STUDENT = [nbtools.NOTEBOOKS / n for n in ("01_data.ipynb", "02_forward.ipynb", "03_loss.ipynb", "04_grad.ipynb",
                                           "05_update.ipynb", "06_train.ipynb")]


@pytest.mark.slow
def test_the_student_kernels_match_the_references(tmp_path, monkeypatch):
    """The solutions of simulate_student (typed into notebook cells, checked in the simulator) in place of the
    course's, on the executor: the launchers still give the references' results, and fit the twin's losses."""
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    simulate_student(STUDENT)
    try:
        st = mine.use_mine(quiet=True)
        theirs = {k for k, (fn, _) in st.items() if fn is not None}
        assert {"1.2", "1.3", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3", "4.1", "4.2", "4.3", "5.1", "5.2", "5.3",
                "6.1", "6.2"} <= theirs, theirs
        with cpu.running():
            launchers_match_references(seed=1)
            test_fit_on_the_executor_equals_the_numpy_twin(None)
            compiled = {py.__module__ for py, *_ in cpu._cache}
        assert any(m.startswith(mine.BUNDLE_PREFIX) for m in compiled), compiled  # their kernels ran here
    finally:
        mine.use_course()


def test_the_lines_about_a_run_say_whose_kernels_where_and_at_which_sizes(monkeypatch):
    """course.runtime.mine.trained: every device's history, the student's pieces in place or not."""
    epoch = [dict(epoch=1, seconds=1.0, test_loss=0.3, test_acc=0.9272)]
    setup = dict(n_train=59968, n_in=784, hidden=128, batch_size=64)
    run = dict(epoch=epoch, setup=setup, steps=937, device="cpu")
    keys = mine.step_pieces("sgd")
    line = mine.trained(run, "SGD", keys)
    assert line.startswith("SGD: test accuracy 0.9272 (784-128-10 on 59,968 images, 1 epoch of batch 64)"), line
    assert "every one of its 937 steps on the course's kernels on the CPU executor" in line, line
    assert "with the course's" not in line, line
    monkeypatch.setattr(registry, "_CHOSEN", {k: None for k in keys})
    line = mine.trained(dict(run, device="gpu"), "SGD", keys)
    assert "on your kernels (9 of 9 pieces yours) on the GPU" in line, line
    assert line.endswith(f", with the course's {mine.ALWAYS_COURSE}"), line  # the step's pieces without an exercise
    monkeypatch.setattr(registry, "_CHOSEN", {k: None for k in keys[:3]})
    twin = dict(run, device="numpy", kernel_steps=3, kernel_device="sim")
    line = mine.trained(twin, "SGD", keys)
    assert "steps 1-3 on your kernels where they passed (3 of 9 pieces yours" in line and "the twin" in line, line
    assert "not by kernels" in mine.trained(dict(run, device="numpy"), "SGD", keys)


@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (3, 17, 5), (130, 9, 131)])
def test_register_blocked_matmuls_local_arrays_across_barriers(executor, M, K, N):
    """notebook 15's matmul v3-v5: local accumulators (cuda.local.array) alive across the tile loop's barriers."""
    from course.matmul import matmul_v3, matmul_v4, matmul_v5
    r = rng(M)
    A, B = r.standard_normal((M, K)).astype(np.float32), r.standard_normal((K, N)).astype(np.float32)
    for launcher in (matmul_v3, matmul_v4, matmul_v5):
        close(launcher(d(A), d(B)).copy_to_host(), A.astype(np.float64) @ B)


def test_the_kernels_of_the_course_that_need_a_gpu_say_so_quietly(executor, capsys):
    """A course kernel the executor cannot run (10's fused kernels: grid-wide barriers, shuffles) falls back without a
    note on stderr (notebooks compare their outputs); course.runtime.cpu.fallbacks() lists it with the construct."""
    from course.fused import zero_kernel  # noqa: F401  (a module of the course's)
    import course.fused as fused
    assert cpu._fallback(fused.forward_kernel.py_func, "a test construct") is False
    assert capsys.readouterr().err == ""
    assert any(name == "forward_kernel" and "a test construct" in why for name, why in cpu.fallbacks())


def test_a_ctrl_c_during_a_compile_is_raised_after_it_not_dropped():
    # numba's CPU compiler calls back into Python through ctypes (llvmlite's object-cache hook); ctypes prints and
    # drops an exception raised in a callback, so a Ctrl-C landing there was lost (`course train` trained on: 3 of 8
    # runs before _ctrl_c_after). A ctypes callback that receives the SIGINT stands in for the compile.
    import ctypes
    import signal

    @ctypes.CFUNCTYPE(None)
    def callback():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at one of these instructions, inside the callback
            pass

    reached = []
    with pytest.raises(KeyboardInterrupt):
        with cpu._ctrl_c_after():
            callback()
            reached.append("after the callback")
    assert reached == ["after the callback"]  # the block ran to its end, then the Ctrl-C came
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    dropped = []  # without it, the same Ctrl-C is dropped (ctypes hands it to sys.unraisablehook): why the fix
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: dropped.append(u.exc_type)
    try:
        callback()
    finally:
        sys.unraisablehook = hook
    assert dropped == [KeyboardInterrupt]


@cuda.jit(device=True)
def _half_warp_sum(v):
    return v + cuda.shfl_down_sync(0xFFFFFFFF, v, 16)


@cuda.jit
def shuffle_kernel(x, out):
    """A warp shuffle in a device function: neither the executor nor the simulator has one."""
    i = cuda.grid(1)
    out[i] = _half_warp_sum(x[i])


def test_a_warp_shuffle_says_in_one_line_that_it_needs_a_gpu():
    """the executor used to promise a simulator run that ended in an AttributeError."""
    from course.runtime.device import NotSimulable
    x, out = d(np.ones(32, np.float32)), d(np.zeros(32, np.float32))
    for where in (cpu.running, cpu.simulating):
        with where(), pytest.raises(NotSimulable) as e:
            shuffle_kernel[1, 32](x, out)
        assert str(e.value) == ("shuffle_kernel calls cuda.shfl_down_sync (in its device function _half_warp_sum): "
                                "a warp shuffle needs a GPU; neither numba's CUDA simulator nor the CPU executor "
                                "has one")
