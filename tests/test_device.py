"""The GPU/simulator choice: decided once by `import course`, forced by COURSE_DEVICE, reported by `info`."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from numba import cuda, float32

import course
from course.runtime import device


def run(*args, **env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_mode_matches_numba():
    assert device.simulator_enabled() == course.SIMULATOR


def test_info_names_the_device():
    r = run("-m", "course", "info")
    assert r.returncode == 0, r.stderr
    if course.SIMULATOR:
        assert "simulator" in r.stdout
    else:
        assert "compute capability" in r.stdout and "SMs" in r.stdout


def test_forcing_the_simulator():
    r = run("-c", "import course, numba.cuda; print(course.SIMULATOR, type(numba.cuda.get_current_device()).__name__)",
            COURSE_DEVICE="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "FakeCUDADevice"]
    assert "CUDA simulator" in r.stderr


def test_bad_setting_is_refused():
    r = run("-c", "import course", COURSE_DEVICE="tpu")
    assert r.returncode != 0 and "COURSE_DEVICE='tpu'" in r.stderr


@pytest.mark.skipif(bool(device.simulator_only()), reason=str(device.simulator_only()))
def test_importing_numba_cuda_first_in_the_other_mode_is_caught():
    mode = "1" if not course.SIMULATOR else "0"
    want = "gpu" if not course.SIMULATOR else "sim"
    r = run("-c", "import numba.cuda, course", NUMBA_ENABLE_CUDASIM=mode, COURSE_DEVICE=want)
    assert r.returncode != 0 and "import course" in r.stderr


def test_pick():
    assert course.pick(gpu=1, sim=2) == (2 if course.SIMULATOR else 1)


def test_performance_warning_imports_on_every_build():  # numba.cuda.core.errors does not exist on macOS's 0.20.1
    cls = device.performance_warning()
    assert issubclass(cls, Warning) and cls.__name__ == "NumbaPerformanceWarning"


# --- numba internals (course/runtime/device.py): version-checked, patched once ---------------------------------------

sim_only = pytest.mark.skipif(not course.SIMULATOR, reason="patches numba's CUDA simulator")


def test_this_numba_cuda_is_one_the_patches_were_written_for():
    dist, version = device.cuda_build()
    assert dist == "numba-cuda" and version in device.WRITTEN_FOR[dist]


@pytest.mark.parametrize("build", [("numba-cuda", "0.99.0"), ("numba", "0.68.1")])
def test_an_unknown_numba_cuda_is_refused_loudly(monkeypatch, build):
    monkeypatch.setattr(device, "cuda_build", lambda: build)
    with pytest.raises(RuntimeError) as e:
        device.internals()
    assert f"{build[0]} {build[1]}" in str(e.value) and "numba-cuda 0.30.4" in str(e.value)


def test_a_simulator_only_build_refuses_gpu_mode(monkeypatch):
    monkeypatch.setenv(device.ENV, "gpu")
    monkeypatch.setattr(device, "simulator_only", lambda: "it has only the simulator")
    with pytest.raises(RuntimeError, match="has only the simulator"):
        device.setup()


@sim_only
def test_threads_asking_for_one_shared_array_get_the_same_one(monkeypatch):
    import threading
    import time

    K, _ = device.internals()
    shared, got, start = K.FakeCUDAShared(0), [], threading.Barrier(32)
    empty = np.empty

    def slow_empty(*args, **kwargs):  # widen the window between lookup and insert (upstream: 32 arrays, always)
        time.sleep(0.001)
        return empty(*args, **kwargs)

    def thread():
        start.wait()
        got.append(shared.array(7, np.float32))  # one source line: one array for the whole block

    monkeypatch.setattr(np, "empty", slow_empty)
    threads = [threading.Thread(target=thread) for _ in range(32)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    monkeypatch.undo()
    assert len(got) == 32 and len({id(a) for a in got}) == 1


@cuda.jit
def block_sum(x, total):  # a small tree sum: one shared array, barriers, one atomic add per block
    s = cuda.shared.array(16, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    step = 16
    while step > 1:
        step //= 2
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
    if t == 0:
        cuda.atomic.add(total, 0, s[0])


@sim_only
def test_instruments_report_arrays_atomics_and_barriers_only_while_active():
    adds, shared, barriers = [], [], []

    def run():
        total = cuda.to_device(np.zeros(1, np.float32))
        block_sum[3, 16](cuda.to_device(np.ones(40, np.float32)), total)
        return total.copy_to_host()[0]

    with device.instruments(fill=lambda a: a.fill(np.nan), atomic_add=adds.append,
                            shared=lambda a, line: shared.append((a.size, line)),
                            barrier=lambda b, t, line: barriers.append((b, t, line))):
        assert run() == 40  # the kernel writes every shared cell before reading it: NaN fill changes nothing
        assert not device.in_kernel_thread()
    assert len(adds) == 3  # one atomic add per block
    assert [size for size, _ in shared] == [16]  # one 16-cell array, which the simulator reuses for each block
    assert {b for b, _, _ in barriers} == {(0, 0, 0), (1, 0, 0), (2, 0, 0)}
    assert len(barriers) == 3 * 16 * 5  # every thread: after the load and after each of 4 tree steps
    seen = (len(adds), len(shared), len(barriers))
    assert run() == 40 and (len(adds), len(shared), len(barriers)) == seen  # afterwards: nothing observed


@sim_only
def test_in_kernel_thread_is_true_only_in_a_simulated_thread():
    @cuda.jit
    def where(out):
        out[0] = device.in_kernel_thread()

    out = cuda.to_device(np.zeros(1, np.int32))
    where[1, 1](out)
    assert out.copy_to_host()[0] == 1 and not device.in_kernel_thread()


@sim_only
def test_instruments_make_a_read_before_write_show():
    @cuda.jit
    def reads_unwritten(out):
        s = cuda.shared.array(4, float32)
        out[cuda.threadIdx.x] = s[cuda.threadIdx.x]

    out = cuda.to_device(np.zeros(4, np.float32))
    with device.instruments(fill=lambda a: a.fill(np.nan), atomic_add=lambda i: None):
        reads_unwritten[1, 4](out)
    assert np.isnan(out.copy_to_host()).all()


@sim_only
def test_the_cuda_swap_for_device_functions_lasts_until_the_last_thread_leaves():
    # Two threads in one module's device functions: the first to leave must not restore the real `cuda` under
    # the second (numba-cuda < 0.30 did: https://github.com/NVIDIA/numba-cuda/pull/690).
    import threading
    import types as pytypes

    K, _ = device.internals()
    mod = pytypes.ModuleType("other_module")
    mod.cuda = cuda
    exec("def f(): pass", mod.__dict__)
    fake = object()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with K.swapped_cuda_module(mod.f, fake):
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with K.swapped_cuda_module(mod.f, fake):
            b_in.set()
            a_out.wait(5)
            seen["inside"] = mod.cuda
    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start(), tb.start(), ta.join(), tb.join()
    assert seen["inside"] is fake and mod.cuda is cuda



def _module_with_a_kernel(name):
    """A module of its own whose kernel needs the simulator's fake `cuda` (grid, shared): out[i] = i + 1."""
    import types as pytypes
    mod = pytypes.ModuleType(name)
    mod.cuda, mod.float32 = cuda, float32
    exec("def k(out):\n"
         "    s = cuda.shared.array(8, float32)\n"
         "    i = cuda.grid(1)\n"
         "    s[cuda.threadIdx.x] = i + 1\n"
         "    cuda.syncthreads()\n"
         "    out[i] = s[cuda.threadIdx.x]\n", mod.__dict__)
    mod.k = cuda.jit(mod.k)
    return mod


@sim_only
def test_a_thread_stopped_inside_the_swap_leaves_later_launches_working():
    """A simulated thread stopped inside swapped_cuda_module (its count never returns to 0), then the real module
    forced back (settle_simulator after a failed check): every later launch of that module used to skip the swap
    and fail with "module 'numba.cuda' has no attribute 'grid'" until a restart (a CI run under load)."""
    K, _ = device.internals()
    mod = _module_with_a_kernel("stopped_inside")
    stuck = K.swapped_cuda_module(mod.k.fn, K.FakeCUDAModule((1, 1, 1), (8, 1, 1), 0))
    stuck.__enter__()                               # a thread that never leaves
    mod.cuda = cuda                                 # the real module forced back, the count still 1
    out = np.zeros(8, np.float32)
    mod.k[1, 8](out)                                # the launch heals first, and swaps
    assert np.array_equal(out, np.arange(1, 9)) and mod.cuda is cuda
    stuck = K.swapped_cuda_module(mod.k.fn, K.FakeCUDAModule((1, 1, 1), (8, 1, 1), 0))
    stuck.__enter__()
    assert device.heal_swaps() == 1 and mod.cuda is cuda   # settle_simulator's call, no thread running
    mod.k[1, 8](out)
    assert np.array_equal(out, np.arange(1, 9)) and mod.cuda is cuda


@sim_only
def test_a_reused_id_of_dead_globals_is_a_new_swap():
    """Checks launch simulated twins built in fresh copies of a kernel's globals; a dead copy's id can come back
    for a new one. An entry left under that id for another dict must not stop the new dict's swap."""
    K, _ = device.internals()
    mod = _module_with_a_kernel("reused_id")
    device._swaps[id(mod.__dict__)] = [3, {"cuda"}, {"cuda": cuda}]   # what a dead dict of the same id left
    fake = K.FakeCUDAModule((1, 1, 1), (8, 1, 1), 0)
    with K.swapped_cuda_module(mod.k.fn, fake):     # a device function's call: no heal before it
        assert mod.cuda is fake
    assert mod.cuda is cuda
    out = np.zeros(8, np.float32)
    mod.k[1, 8](out)
    assert np.array_equal(out, np.arange(1, 9)) and mod.cuda is cuda
    assert id(mod.__dict__) not in device._swaps

@sim_only
def test_a_thread_leaving_after_a_heal_does_not_undo_a_later_swap():
    """A thread retired by _stop that leaves its swap after heal_swaps cleared it must not put the real module back
    under a later launch's threads, and a thread of an aborted block swaps nothing."""
    import threading
    K, _ = device.internals()
    mod = _module_with_a_kernel("late_exit")
    late = K.swapped_cuda_module(mod.k.fn, K.FakeCUDAModule((1, 1, 1), (8, 1, 1), 0))
    late.__enter__()                                # a retired thread, still inside
    assert device.heal_swaps() == 1 and mod.cuda is cuda
    fake = K.FakeCUDAModule((1, 1, 1), (8, 1, 1), 0)
    with K.swapped_cuda_module(mod.k.fn, fake):     # a later launch
        late.__exit__(None, None, None)             # the retired thread leaves at last
        assert mod.cuda is fake
    assert mod.cuda is cuda and id(mod.__dict__) not in device._swaps
    seen = []

    def aborted():
        threading.current_thread().abort = True     # as _stop marks a failed block's threads
        try:
            with K.swapped_cuda_module(mod.k.fn, fake):
                seen.append("inside")
        except RuntimeError as e:
            seen.append(str(e))
    t = threading.Thread(target=aborted)
    t.start(), t.join()
    assert seen == ["abort flag set on a device function call"] and mod.cuda is cuda


def _module_with_a_device_function(name):
    """A module of its own with a short device function (as course.forward's, called from another module)."""
    import types as pytypes
    mod = pytypes.ModuleType(name)
    mod.cuda = cuda
    exec("def short(t):\n"
         "    return t + cuda.threadIdx.x\n", mod.__dict__)
    mod.short = cuda.jit(device=True)(mod.short)
    return mod


_short_module = _module_with_a_device_function("short_device")
_short = _short_module.short


@cuda.jit
def _fail_while_others_call(out):
    t = cuda.threadIdx.x
    if t == 5:
        raise ValueError("thread 5")
    for j in range(1000):               # most of a thread's time in and out of the other module's swap
        out[t] = _short(j)


@sim_only
def test_host_code_after_a_failed_block_sees_the_real_cuda():
    """A block fails while its other threads are inside another module's device function: host code of that
    module, right after the launch raised, must see the real `cuda` (a CI run under load saw the fake in
    course.forward's `cuda.device_array`: a stopped thread's swap, left behind)."""
    for trial in range(6):
        with pytest.raises(ValueError, match="thread 5"):
            _fail_while_others_call[1, 64](np.zeros(64, np.float32))
        assert _short_module.cuda is cuda, trial
        assert not device._swaps, trial


@cuda.jit
def _block_reverse(x, out, stop):
    """Each block reverses its slice of x through shared memory; threads >= stop return before the barrier."""
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    if t >= stop:
        return                          # a thread that leaves no longer counts at the barrier (as on a GPU)
    s[t] = x[i]
    cuda.syncthreads()
    out[i] = s[stop - 1 - t]
    cuda.syncthreads()                  # a second barrier, reached by the live threads only


@cuda.jit
def _raise_in_one_thread(out):
    if cuda.threadIdx.x == 5:
        raise ValueError("thread 5")
    cuda.syncthreads()
    out[cuda.threadIdx.x] = 1.0


@sim_only
def test_the_simulators_pooled_blocks_keep_barriers_exits_and_aborts():
    import threading
    x = np.random.default_rng(0).standard_normal(3 * 64).astype(np.float32)
    for stop in (64, 40):               # every thread at the barriers; 24 threads per block gone before them
        out = np.zeros_like(x)
        _block_reverse[3, 64](x, out, stop)
        want = np.zeros_like(x)
        for b in range(3):
            want[b * 64:b * 64 + stop] = x[b * 64:b * 64 + stop][::-1]
        assert np.array_equal(out, want), stop
    Worker = device.internals()[1]._CourseWorker
    workers = lambda: {t for t in threading.enumerate() if isinstance(t, Worker)}
    before = workers()
    _block_reverse[3, 64](x, np.zeros_like(x), 64)
    assert len(before) >= 64 and workers() == before   # the next launch reuses the block's 64 threads
    with pytest.raises(ValueError, match=r"tid=\[5, 0, 0\] ctaid=\[0, 0, 0\]: thread 5"):
        _raise_in_one_thread[1, 64](np.zeros(64, np.float32))
    device.settle_simulator(_raise_in_one_thread, timeout=10)   # the aborted block's threads unwind
    out = np.zeros_like(x)
    _block_reverse[3, 64](x, out, 64)                 # and the next launch runs on fresh threads
    assert np.array_equal(out[:64], x[:64][::-1])


@cuda.jit
def wait_for_a_flag(flag, out):
    """A thread waiting for something that never happens: nothing sets flag[0]."""
    i = cuda.grid(1)
    while flag[0] == 0:
        pass
    if i < out.size:
        out[i] = 1.0


@cuda.jit
def ones(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1.0


def _workers():
    """The simulator's worker threads alive now (course.runtime.device's pool)."""
    _, simkernel = device.internals()
    worker = getattr(simkernel, "_CourseWorker", None)   # none on a GPU machine before a check simulates a kernel
    return set() if worker is None else {t for t in threading.enumerate() if isinstance(t, worker)}


@pytest.fixture(autouse=True)
def _workers_before():
    """Workers an earlier test of the session left behind are not this test's: _busy_workers leaves them out."""
    _BEFORE[:] = [_workers()]
    yield


_BEFORE = [set()]


def _busy_workers(within=30.0):
    """The simulated threads (started by this test) still running a block after `within` seconds (on a loaded
    machine they take a while to reach their _Stopped)."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        busy = [t for t in _workers() - _BEFORE[0] if not t.idle.is_set()]
        if not busy:
            break
        time.sleep(0.05)
    return busy


def _a_correct_launch_is_fast():
    out = cuda.to_device(np.zeros(64, np.float32))
    t0 = time.perf_counter()
    ones[2, 32](out)
    assert time.perf_counter() - t0 < 5.0 and out.copy_to_host().sum() == 64  # it took 51 s after a hang
    cpu0 = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - cpu0 < 0.2  # no thread spins on when the process is idle


@sim_only
def test_a_launch_past_its_deadline_is_stopped_with_one_clear_line(monkeypatch):
    monkeypatch.setenv(device.DEADLINE_ENV, "1")
    flag, out = cuda.to_device(np.zeros(1, np.int32)), cuda.to_device(np.zeros(64, np.float32))
    t0 = time.perf_counter()
    with pytest.raises(device.LaunchDeadline, match=r"^your kernel ran for more than 1 s: a thread waiting for "
                                                    r"something that never happens\?"):
        wait_for_a_flag[2, 32](flag, out)
    assert time.perf_counter() - t0 < 1 + device.STOP_WAIT_S + 5.0  # + a loaded machine's slack
    assert not _busy_workers()
    _a_correct_launch_is_fast()


@sim_only
def test_a_check_of_a_hanging_kernel_fails_with_the_deadline(monkeypatch):
    from course.checks.core import CheckFailure
    from course.checks.data import check_scale_kernel

    @cuda.jit
    def scale_kernel(x, out):
        i = cuda.grid(1)
        while x[0] < 0:  # uint8: never
            pass
        while i >= 0:  # waits for i to go negative: never
            pass

    monkeypatch.setenv(device.DEADLINE_ENV, "1")
    with pytest.raises(CheckFailure, match="your kernel ran for more than 1 s"):
        check_scale_kernel(scale_kernel)
    assert not _busy_workers()


@sim_only
@pytest.mark.skipif(not __import__("importlib.metadata").metadata.version("numba-cuda").startswith("0.30"),
                    reason="macOS's numba-cuda 0.20.1: a SIGINT does not reach the waiting launch there (seen in "
                           ".ci/platforms.py mac, 2026-12-02); the deadline still stops it")
def test_an_interrupted_launch_leaves_no_thread_running():
    flag, out = cuda.to_device(np.zeros(1, np.int32)), cuda.to_device(np.zeros(64, np.float32))
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C, to the process
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        wait_for_a_flag[2, 32](flag, out)
    assert time.perf_counter() - t0 < 0.5 + device.STOP_WAIT_S + 5.0  # not at the launch's deadline
    timer.join()
    assert not _busy_workers()
    _a_correct_launch_is_fast()


@sim_only
@pytest.mark.parametrize("grid, block, says", [
    (1, 2048, "the block's x is 2,048: at most 1,024"),
    (1, (32, 32, 2), "a block of 2,048 threads: at most 1,024"),
    (1, (1, 1, 65), "the block's z is 65: at most 64"),
    ((1, 70000), 1, "the grid's y is 70,000: at most 65,535"),
    ((1, 1, 65536), 1, "the grid's z is 65,536: at most 65,535"),
    (2**31, 1024, "the grid's x is 2,147,483,648: at most 2,147,483,647"),
    (0, 32, "the grid's x is 0: every size"),
    (-1, 32, "the grid's x is -1: every size"),
    (1, 0, "the block's x is 0: every size"),
])
def test_a_launch_a_gpu_refuses_is_refused_on_the_executor_and_in_the_simulator(grid, block, says):
    """CUDA's launch limits, checked in one place (device.check_launch) for both, before any
    thread runs (k[2**31, 1024] used to run for minutes; k[0, 32] did nothing)."""
    from course.runtime import cpu
    out = cuda.to_device(np.zeros(64, np.float32))
    for where in (cpu.running, cpu.simulating):
        with where(), pytest.raises(device.LaunchConfigError) as e:
            ones[grid, block](out)
        msg = str(e.value)
        assert msg.startswith("ones[") and "a GPU refuses this launch (CUDA_ERROR_INVALID_VALUE)" in msg, msg
        assert says in msg and "\n" not in msg, msg
    assert out.copy_to_host().sum() == 0
    ones[2, (32, 32)](out)  # the limits themselves are allowed: 1,024 threads a block
    assert out.copy_to_host().sum() == 64
