"""Choose, once and before numba is imported, between a real CUDA GPU and numba's CUDA simulator.

Every touch of numba's internals (the simulator's classes, the dispatcher's device query) lives in this file, below
"numba internals", and each goes through `internals()`, which refuses a numba build it was not written for."""
import contextlib
import ctypes
import importlib.metadata
import os
import sys
import threading
from types import SimpleNamespace

ENV = "COURSE_DEVICE"  # "gpu", "cpu" (the CPU executor, course/runtime/cpu.py), "sim" or "auto" (default)
MODES = ("auto", "gpu", "cpu", "sim")
SET_BY = "COURSE_SET_CUDASIM"  # the NUMBA_ENABLE_CUDASIM value setup() wrote: a child process (a notebook's kernel
                               # started by pytest, a command) that inherits it was not asked for the simulator

# The builds of numba.cuda whose internals this file was written for and tested against: numba-cuda 0.30.4
# (requirements.txt on Linux and Windows) and numba-cuda 0.20.1, the newest release that installs on macOS (a
# pure-Python wheel). A new version: read numba_cuda/numba/cuda/simulator/kernelapi.py and kernel.py for the
# names used below, run the simulator tests, then add it here.
WRITTEN_FOR = {"numba-cuda": ("0.30.4", "0.20.1")}
# Builds that have only the simulator: macOS has no CUDA, and 0.20.1's compiler does not import with the numba
# (>= 0.62) that macOS gets ("cannot import name 'removerefctpass' from 'numba.core'").
SIMULATOR_ONLY = {"0.20.1": "numba-cuda 0.20.1 (the macOS build) has only the simulator: macOS has no CUDA, "
                            "and its compiler does not work with the numba it is installed with"}


def _libcuda():
    """The CUDA driver library (ctypes), or None when there is none."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def driver_cuda_version():
    """(major, minor) of the newest CUDA the installed driver supports (cuDriverGetVersion), or None without one."""
    lib = _libcuda()
    version = ctypes.c_int(0)
    try:
        if lib is None or lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except AttributeError:
        return None
    return version.value // 1000, version.value % 1000 // 10


def _gpu_count():
    """Number of CUDA devices the driver reports (0 when there is no driver), without importing numba."""
    lib = _libcuda()
    if lib is None:
        return 0
    count = ctypes.c_int(0)
    try:
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
    except AttributeError:
        return 0
    return count.value


def _want():
    """COURSE_DEVICE, checked: one of MODES."""
    want = os.environ.get(ENV, "auto").strip().lower()
    if want not in MODES:
        raise ValueError(f"{ENV}={want!r}: use 'gpu', 'cpu', 'sim' or 'auto'")
    return want


def executor_wanted(simulator):
    """True when launches should run on the CPU executor: COURSE_DEVICE=cpu, or auto without a GPU (unless
    NUMBA_ENABLE_CUDASIM asks for numba's simulator)."""
    want = _want()
    if not simulator or want == "sim":
        return False
    by_course = os.environ.get(SET_BY) == os.environ.get("NUMBA_ENABLE_CUDASIM")  # a parent course process set it
    return want == "cpu" or by_course or os.environ.get("NUMBA_ENABLE_CUDASIM", "") in ("", "0")


def _choose():
    """Return (simulator: bool, why: str) from COURSE_DEVICE, NUMBA_ENABLE_CUDASIM or the hardware. The CPU
    executor runs on top of numba's simulator (its device arrays, and the checks' launches): simulator True."""
    want = _want()
    if want == "gpu":
        return False, f"{ENV}=gpu"
    if want in ("sim", "cpu"):
        return True, f"{ENV}={want}"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0"):
        if os.environ.get(SET_BY) == os.environ["NUMBA_ENABLE_CUDASIM"]:
            return True, "the course process that started this one found no GPU"
        return True, "NUMBA_ENABLE_CUDASIM is set"
    n = _gpu_count()
    if n > 0:
        return False, f"the CUDA driver reports {n} device(s)"
    return True, "no CUDA driver or device was found"


def setup():
    """Decide the mode, set NUMBA_ENABLE_CUDASIM to match, and return (simulator, why)."""
    simulator, why = _choose()
    os.environ["NUMBA_ENABLE_CUDASIM"] = os.environ[SET_BY] = "1" if simulator else "0"
    # Low-occupancy warnings are noise for the small teaching launches; keep the others (host copies).
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    only = simulator_only()
    if only and not simulator:
        raise RuntimeError(f"{ENV}=gpu, but {only}. Use the simulator (unset {ENV}).")
    if simulator and _no_cuda_bindings():
        # numba-cuda 0.20.1 (macOS) refuses to import without NVIDIA's cuda-bindings, which have no macOS wheels;
        # the simulator needs neither them nor a driver. 0 selects numba-cuda's own ctypes bindings.
        os.environ.setdefault("NUMBA_CUDA_USE_NVIDIA_BINDING", "0")
    _match_numba_config(simulator)
    return simulator, why


def _match_numba_config(simulator):
    """Make numba's config agree with the choice if numba was imported before course (it read the setting then).

    After `import numba` alone, numba.cuda has not chosen yet: re-reading the environment is enough. After
    `import numba.cuda` in the other mode it is too late: RuntimeError, saying what to do."""
    if "numba.core.config" not in sys.modules:
        return
    from numba.core import config
    if "numba.cuda" not in sys.modules:
        if bool(config.ENABLE_CUDASIM) != simulator:
            config.reload_config()
        enabled, first = bool(config.ENABLE_CUDASIM), "numba"
    else:  # numba-cuda 0.30.4 reads numba.cuda.core.config, 0.20.1 numba.core.config: ask numba.cuda itself
        enabled, first = simulator_enabled(), "numba.cuda"
    if enabled != simulator:
        raise RuntimeError(
            f"{first} was imported before course, in the other mode (NUMBA_ENABLE_CUDASIM={int(enabled)}): "
            "put `import course` first (restart the kernel), or set COURSE_DEVICE.")


def simulator_only():
    """Why this numba-cuda cannot run or compile kernels for a GPU (a sentence), or None when it can."""
    try:
        return SIMULATOR_ONLY.get(importlib.metadata.version("numba-cuda"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _no_cuda_bindings():
    """True when NVIDIA's cuda-bindings package is not installed (as on macOS)."""
    import importlib.util
    try:
        return importlib.util.find_spec("cuda.bindings") is None
    except ModuleNotFoundError:  # no `cuda` namespace package at all
        return True


def simulator_enabled():
    """What numba.cuda itself was configured with: True for the simulator."""
    from numba.cuda.core import config
    return bool(config.ENABLE_CUDASIM)


EXECUTOR_NAME = ("CPU executor (no GPU; kernels compiled for the CPU by numba, course/runtime/cpu.py; "
                 "the exercise checks run in numba's CUDA simulator)")


def describe(simulator):
    """A dict describing the device the kernels run on."""
    from numba import cuda
    executor = sys.modules.get("course.runtime.cpu")
    if simulator and executor is not None and executor.active():
        return {"mode": "cpu", "name": EXECUTOR_NAME}
    if simulator:
        return {"mode": "simulator", "name": "numba CUDA simulator (no GPU; kernels run as Python threads)"}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    free, total = cuda.current_context().get_memory_info()
    return {"mode": "gpu", "name": name, "compute_capability": "%d.%d" % dev.compute_capability,
            "sms": dev.MULTIPROCESSOR_COUNT, "memory_gib": round(total / 2**30, 1)}


def info_line(d):
    """One line for humans from describe()'s dict."""
    if d["mode"] in ("simulator", "cpu"):
        return f"device: {d['name']}"
    return (f"device: {d['name']} (compute capability {d['compute_capability']}, "
            f"{d['sms']} SMs, {d['memory_gib']} GiB)")


def performance_warning():
    """numba-cuda's NumbaPerformanceWarning class, for warnings filters: `numba.cuda.core.errors` in 0.30, but
    `numba.core.errors` in 0.20.1 (macOS), where importing the former fails."""
    try:
        from numba.cuda.core.errors import NumbaPerformanceWarning
    except ImportError:
        from numba.core.errors import NumbaPerformanceWarning
    return NumbaPerformanceWarning


# --- numba internals: everything below reaches into numba-cuda's private modules ------------------------

_BUILD = []  # cuda_build()'s answer, once: reading a distribution's metadata costs ~0.2 ms (every launch asks)


def cuda_build():
    """(distribution, version) that provides `numba.cuda`: ("numba-cuda", "0.30.4"), or ("numba", ...) for the
    deprecated copy inside numba itself (what a Mac gets without numba-cuda)."""
    if not _BUILD:
        _BUILD.append(_cuda_build())
    return _BUILD[0]


def _cuda_build():
    import numba.cuda
    if "numba_cuda" in numba.cuda.__file__.replace(os.sep, "/").split("/"):
        return "numba-cuda", importlib.metadata.version("numba-cuda")
    import numba
    return "numba", numba.__version__


def internals():
    """The simulator's modules (kernelapi, kernel) after checking that this numba.cuda is one WRITTEN_FOR.

    Raises RuntimeError naming the versions this file was written for, instead of patching code it has not read."""
    dist, version = cuda_build()
    if version not in WRITTEN_FOR.get(dist, ()):
        known = ", ".join(f"{d} {v}" for d, vs in WRITTEN_FOR.items() for v in vs)
        raise RuntimeError(
            f"course/runtime/device.py patches numba's CUDA simulator and was written for {known}; this is {dist} "
            f"{version}. Install the versions in requirements.txt (pip install -r requirements.txt), or check "
            f"the patches in course/runtime/device.py against this version and add it to WRITTEN_FOR.")
    from numba.cuda.simulator import kernel, kernelapi
    return kernelapi, kernel


# What the patched allocations and atomics report to while `instruments()` is active (None: behave as upstream).
_instrument = None


def patch_simulator():
    """Patch numba-cuda's simulator once (called by `import course` in simulator mode); idempotent.

    1. Shared arrays under a lock. `FakeCUDAShared.array` (numba_cuda/numba/cuda/simulator/kernelapi.py) looks
       the array up by the calling source line in `self._allocations` and creates it when missing, without a
       lock; each GPU thread is a Python thread, and inside a Jupyter kernel two threads of a block sometimes both
       create it and then work on separate copies, so a correct kernel fails now and then. Same key, same lookup,
       under a lock. (Its docstring states the other limit: one `cuda.shared.array` per source line.)
    2. Device functions in another module than their kernel. Before numba-cuda 0.30 (0.20.1, the macOS build),
       `swapped_cuda_module` swaps `cuda` in that module's globals per thread without a lock or a count, so one
       thread can restore the real module while another still runs ("module 'numba.cuda' has no attribute
       'local'"): https://github.com/NVIDIA/numba-cuda/pull/690 fixed it upstream; this installs the same fix
       (a count per module under a lock: the first thread in swaps, the last one out restores), made robust
       against threads stopped inside the swap and reused ids (`_counted_swap`, `heal_swaps`): on 0.30 too.
    3. Hooks for `instruments()`: new shared and local arrays can be filled and reported, atomic adds and
       barriers (`cuda.syncthreads()`) observed.
    4. Blocks run on reused threads that wait on one condition (`_install_block_pool`): the same semantics,
       2-3x faster (see its docstring).
    5. A negative index into a kernel's array argument is refused (`_refuse_negative_indices`), as on the
       executor, instead of wrapping to the array's end.
    6. What only a GPU's compiler uses is accepted, so that a kernel is written once for every device:
       `cuda.jit(max_registers=...)` (ignored: no registers here) and `cuda.shared.array(..., alignment=...)`
       (honoured: the array starts at a multiple of it; upstream raises "Array alignment is not supported")."""
    K, kernel = internals()
    if getattr(K.FakeCUDAShared.array, "_course", False):
        return
    upstream = (K.FakeCUDAShared.array, K.FakeCUDALocal.array, K.FakeCUDAAtomic.add, K.FakeCUDAModule.syncthreads)
    lock = threading.Lock()

    def shared_array(self, shape, dtype, alignment=None):
        if shape == 0:  # dynamic shared memory: the simulator's own path
            return upstream[0](self, shape, dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key: the line that asks
        with lock:
            a = self._allocations.get(key)
            if a is None:
                dt = K.numpy_support.as_dtype(dtype) if isinstance(dtype, K.types.Type) else dtype
                a = self._allocations[key] = aligned_empty(shape, dt, alignment or 1)
                if _instrument is not None:
                    _instrument.fill(a)
                    _instrument.shared(a, caller.f_lineno)
        return a

    def local_array(self, shape, dtype, *alignment):
        a = upstream[1](self, shape, dtype, *alignment)
        if _instrument is not None:
            _instrument.fill(a)
        return a

    def atomic_add(self, array, index, val):
        if _instrument is not None:
            _instrument.atomic_add(index)
        return upstream[2](self, array, index, val)

    def syncthreads(self):
        if _instrument is not None:
            t = threading.current_thread()  # a simulator BlockThread: it knows its block and thread
            _instrument.barrier(tuple(t.blockIdx), tuple(t.threadIdx), sys._getframe(1).f_lineno)
        return upstream[3](self)

    for f in (shared_array, local_array, atomic_add, syncthreads):
        f._course = True
    K.FakeCUDAShared.array, K.FakeCUDALocal.array, K.FakeCUDAAtomic.add = shared_array, local_array, atomic_add
    _refuse_negative_indices()
    K.FakeCUDAModule.syncthreads = syncthreads
    _accept_max_registers()
    kernel.swapped_cuda_module = K.swapped_cuda_module = _counted_swap   # item 2, on every numba-cuda
    _install_block_pool(kernel)


def aligned_empty(shape, dtype, alignment):
    """np.empty(shape, dtype) whose first element's address is a multiple of `alignment` bytes."""
    import numpy as np
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + n].view(dtype).reshape(shape)


def _accept_max_registers():
    """Item 6 of patch_simulator: the simulator's `cuda.jit` (numba_cuda/numba/cuda/simulator/api.py) takes
    `max_registers` and drops it, as `numba.cuda.jit`: kernels capped on a GPU are written once."""
    import numba.cuda
    upstream = numba.cuda.jit

    def jit(*args, max_registers=None, **kwargs):
        return upstream(*args, **kwargs)

    jit._course = True
    numba.cuda.jit = jit


def negative_index(i):
    """What the executor and the simulator say of a negative index into an array in a kernel."""
    return (f"index {i} is negative: out of bounds (the course refuses it: NumPy's rule would take the array's end "
            "instead, which hides an off-by-one)")


def _refuse_negative_indices():
    """Item 5 of patch_simulator: a kernel's array argument (`FakeWithinKernelCUDAArray`,
    numba_cuda/numba/cuda/simulator/cudadrv/devicearray.py) refuses a negative index, which NumPy's indexing under
    it would wrap to the end: `out[i - 1]` at i = 0 wrote the last element. The executor refuses it too (cpu._ix)."""
    from numba.cuda.simulator.cudadrv import devicearray
    import numpy as np
    cls = devicearray.FakeWithinKernelCUDAArray
    get, put = cls.__getitem__, cls.__setitem__

    def refuse(idx):
        for i in idx if isinstance(idx, tuple) else (idx,):
            if isinstance(i, (int, np.integer)) and i < 0:
                raise IndexError(negative_index(i))

    def getitem(self, idx):
        refuse(idx)
        return get(self, idx)

    def setitem(self, idx, val):
        refuse(idx)
        return put(self, idx, val)

    cls.__getitem__, cls.__setitem__ = getitem, setitem


MAX_IDLE_THREADS = 4096  # simulated GPU threads kept waiting for the next block, over all block shapes
_idle = {}               # (block shape, debug) -> its idle workers, least recently used first
LAUNCH_DEADLINE_S = 120.0  # a simulated launch running longer is stopped (a notebook runs in under 2 minutes)
DEADLINE_ENV = "COURSE_SIM_DEADLINE"  # seconds, to change LAUNCH_DEADLINE_S
STOP_WAIT_S = 5.0        # how long stopping a launch waits for its threads to unwind
BARRIER_LOOK_S = 1.0     # a thread waiting at a barrier looks at its abort flag this often (besides being woken)
ABORT_QUIET_S = 0.5      # a failed block's other threads end on their own while one ends at least this often
WAKE_S = 0.1             # a launch's waiting thread looks at the clock (and at a pending Ctrl-C) this often
STOP_SWITCH_S = 1e-4     # the interpreter's thread switch interval meanwhile (Python's default: 5 ms)
_launch = threading.local()  # .deadline: time.monotonic() by which the current launch must end


class LaunchDeadline(RuntimeError):
    """A simulated kernel launch ran past its deadline: its threads were stopped."""


class _Stopped(Exception):
    """Raised inside a simulated GPU thread to stop it (a launch past its deadline, or interrupted)."""


def launch_deadline():
    """Seconds a simulated launch may run: $COURSE_SIM_DEADLINE if it is a positive number, else LAUNCH_DEADLINE_S."""
    try:
        s = float(os.environ.get(DEADLINE_ENV, ""))
    except ValueError:
        return LAUNCH_DEADLINE_S
    return s if s > 0 else LAUNCH_DEADLINE_S


def _raise_in(thread, exc_type):
    """Make `thread` raise exc_type at its next Python instruction (how a spinning simulated thread is stopped)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def _stop(workers, manager, patience=False):
    """Stop a block's threads: those at a barrier are woken to abort; with `patience`, those still running may end
    on their own (see _wait_while_ending); the rest get _Stopped; then retire them. A thread that does not unwind
    within STOP_WAIT_S is marked retired: nothing waits for it any more (see _threads_busy), and a device function
    it calls raises (see _counted_swap)."""
    import time
    for w in workers:
        w.abort = True
    with manager._cond:
        manager._cond.notify_all()
    if patience:
        _wait_while_ending(workers)
    for w in workers:
        if not w.idle.is_set() and w.is_alive():
            _raise_in(w, _Stopped)
    until, interval = time.monotonic() + STOP_WAIT_S, sys.getswitchinterval()
    sys.setswitchinterval(STOP_SWITCH_S)  # each spinning thread reaches its _Stopped sooner
    try:
        for w in workers:
            w.idle.wait(max(0.0, until - time.monotonic()))
            w.retired = not w.idle.is_set()
            w.job = None  # after its block: it leaves its loop instead of waiting for the next one
            w.go.release()
    finally:
        sys.setswitchinterval(interval)


def _wait_while_ending(workers):
    """Wait while a failed block's other threads end on their own (at their next barrier, or by returning): until
    all have, or none has for ABORT_QUIET_S (those spin). An asynchronous _Stopped can land anywhere, inside a
    swap of `cuda` too (see _counted_swap): it is kept for threads that would never end."""
    running = [w for w in workers if not w.idle.is_set()]
    while running:
        running[0].idle.wait(ABORT_QUIET_S)
        still = [w for w in running if not w.idle.is_set()]
        if len(still) == len(running):
            return
        running = still


def _install_launch_deadline(kernel):
    """Each launch (not a device function's call) sets the deadline its blocks must meet."""
    upstream = kernel.FakeCUDAKernel.__call__
    if getattr(upstream, "_course", False):
        return

    def call(self, *args):
        if getattr(self, "_device", False) or getattr(_launch, "deadline", None) is not None:
            return upstream(self, *args)
        import time
        check_launch(self.py_func.__name__, *kernel.normalize_kernel_dimensions(self.grid_dim, self.block_dim))
        refuse_shuffles(self.py_func)
        heal_swaps()                     # what a stopped launch's threads left behind (see _counted_swap)
        _launch.deadline = time.monotonic() + launch_deadline()
        try:
            return upstream(self, *args)
        finally:
            _launch.deadline = None
            heal_swaps()                 # host code after a failed launch sees the real module

    call._course = True
    kernel.FakeCUDAKernel.__call__ = call


def _install_block_pool(kernel):
    """Item 4 of patch_simulator: the simulator's BlockManager.run with reused threads and a condition variable.

    Upstream (numba_cuda/numba/cuda/simulator/kernel.py, BlockManager.run and BlockThread.syncthreads) starts a new
    Python thread per GPU thread for every block (Thread.start waits until the thread runs: most of the time of a
    small kernel), and its loop polls every thread's flag, holding the interpreter while the threads it waits for
    could run (its comment lists both as "potential optimisations"). Here a block's threads are workers kept
    between blocks and launches; a barrier is a count under one threading.Condition: the last live thread to
    arrive releases the others, and a thread that returns no longer counts (as upstream). A thread that raises
    aborts the block as upstream (the others raise at their next barrier) and its workers are not reused."""
    import numpy as np
    BlockThread = kernel.BlockThread

    class Worker(BlockThread):
        """A simulated GPU thread that runs one block after another: (f, args, manager, blockIdx) per job."""

        def __init__(self, manager, threadIdx, debug):
            super().__init__(None, manager, (0, 0, 0), threadIdx, debug)
            self.go, self.idle, self.job, self.retired = threading.Semaphore(0), threading.Event(), None, False
            self.idle.set()

        def run(self):
            try:
                self.serve()
            except _Stopped:              # stopped between two jobs, or as it finished one: it is retired anyway
                pass
            finally:                      # a _Stopped that lands in serve's `finally` skips its idle.set()
                self.idle.set()

        def serve(self):
            while True:
                self.go.acquire()
                if self.job is None:      # retired
                    return
                f, args, m, block = self.job
                self._manager, self.blockIdx, self.exception, self.abort = m, kernel.Dim3(*block), None, False
                try:
                    if self.debug:
                        np.seterr(divide="raise")
                    f(*args)
                except Exception as e:    # as BlockThread.run: the message names the thread and the block
                    where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
                    self.exception = (type(e)(f"{where}: {e}" if str(e) else where), sys.exc_info()[2])
                finally:
                    m._thread_done(self)
                    self.idle.set()

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        m = self._manager
        with m._cond:
            m._waiting += 1
            if m._waiting == m._alive:    # the last one in releases the others
                m._release()
            else:
                generation = m._generation
                while generation == m._generation and not self.abort:
                    m._cond.wait(BARRIER_LOOK_S)   # woken by the release, or looks at abort now and then
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def _release(self):
        self._waiting = 0
        self._generation += 1
        self._cond.notify_all()

    def _thread_done(self, t):
        with self._cond:
            self._alive -= 1
            if t.exception is not None and self._failed is None:
                self._failed = t
            if self._waiting and self._waiting == self._alive:   # the threads that are left wait at a barrier
                self._release()
            self._cond.notify_all()

    def run(self, grid_point, *args):
        import time
        self._cond, self._waiting, self._generation, self._failed = threading.Condition(), 0, 0, None
        deadline = getattr(_launch, "deadline", None) or time.monotonic() + launch_deadline()
        key = (tuple(self._block_dim), self._debug)
        workers = _idle.pop(key, None)
        if workers is None:
            workers = [Worker(self, t, self._debug) for t in np.ndindex(*self._block_dim)]
            for w in workers:
                w.start()
        self._alive = len(workers)
        for w in workers:
            w.idle.clear()
            w.job = (self._f, args, self, grid_point)
            w.go.release()
        late = False
        try:
            with self._cond:
                while self._alive and self._failed is None and not late:
                    left = deadline - time.monotonic()
                    late = left <= 0
                    if not late:  # wakes now and then: a Ctrl-C that another thread received is seen soon
                        self._cond.wait(min(left, WAKE_S))
                failed = self._failed
        except BaseException:             # Ctrl-C: no thread of this launch runs on
            _stop(workers, self)
            raise
        if late:
            _stop(workers, self)
            raise LaunchDeadline(f"your kernel ran for more than {launch_deadline():g} s: a thread waiting for "
                                 f"something that never happens? (block {list(grid_point)}; the simulator stopped "
                                 f"it; {DEADLINE_ENV}=SECONDS changes the limit)")
        if failed is not None:            # abort the block; its workers are retired once they unwind
            _stop(workers, self, patience=True)   # no asynchronous _Stopped unless a thread spins
            raise failed.exception[0].with_traceback(failed.exception[1])
        _idle[key] = workers
        while sum(map(len, _idle.values())) > MAX_IDLE_THREADS:
            for w in _idle.pop(next(iter(_idle))):   # retire the least recently used shape's workers
                w.job = None
                w.go.release()

    BlockThread.syncthreads = syncthreads
    kernel.BlockManager._release, kernel.BlockManager._thread_done = _release, _thread_done
    kernel.BlockManager.run = run
    kernel._CourseWorker = Worker
    _install_launch_deadline(kernel)


MAX_BLOCK_THREADS = 1024                      # CUDA's limits on every GPU since compute capability 2.0
MAX_BLOCK_DIM = (1024, 1024, 64)              # a block's x, y, z
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)      # a grid's x, y, z


class LaunchConfigError(ValueError):
    """A launch configuration a GPU refuses (cuLaunchKernel: CUDA_ERROR_INVALID_VALUE); the executor and the
    simulator refuse it too."""


def check_launch(name, grid, block):
    """Refuse, as a GPU does, a launch whose grid or block (3-tuples of ints) is outside CUDA's limits: one line
    naming the kernel, the launch, what is wrong and the limit. Shared by the executor and the simulator."""
    if (all(0 < g <= m for g, m in zip(grid, MAX_GRID_DIM)) and all(0 < b <= m for b, m in zip(block, MAX_BLOCK_DIM))
            and block[0] * block[1] * block[2] <= MAX_BLOCK_THREADS):
        return                                          # the common case: a few comparisons
    launch = f"{name}[{dims_text(grid)}, {dims_text(block)}]"
    why = None
    for what, dims, limits in (("grid", grid, MAX_GRID_DIM), ("block", block, MAX_BLOCK_DIM)):
        for axis, v, m in zip("xyz", dims, limits):
            if v <= 0:
                why = f"the {what}'s {axis} is {v}: every size of a grid and a block must be at least 1"
            elif v > m:
                why = f"the {what}'s {axis} is {v:,}: at most {m:,}"
            if why:
                break
        if why:
            break
    if why is None:
        why = f"a block of {block[0] * block[1] * block[2]:,} threads: at most {MAX_BLOCK_THREADS:,}"
    raise LaunchConfigError(f"{launch}: a GPU refuses this launch (CUDA_ERROR_INVALID_VALUE): {why}")


_shuffles = {}  # a kernel's py_func -> (function, shuffle) of the first warp shuffle it or a device function calls


def refuse_shuffles(py):
    """Raise NotSimulable, one line, for a kernel that calls a warp shuffle (itself or in a device function it
    calls): neither numba's simulator nor the CPU executor has them (the simulator fails with an AttributeError)."""
    if py not in _shuffles:
        _shuffles[py] = _shuffle_in(py, set())
    found = _shuffles[py]
    if found:
        where = "" if found[0] == py.__name__ else f" (in its device function {found[0]})"
        raise NotSimulable(f"{py.__name__} calls cuda.{found[1]}{where}: a warp shuffle needs a GPU; neither "
                           "numba's CUDA simulator nor the CPU executor has one")


def _shuffle_in(py, seen):
    """(function name, shuffle) for the first warp shuffle py or a device function it names calls, else None."""
    seen.add(py)
    used = [n for n in SHUFFLES if _nested_name(py.__code__, n)]
    if used:
        return py.__name__, used[0]
    for name, v in py.__globals__.items():
        dev = getattr(v, "py_func", None)
        if dev is not None and dev not in seen and _nested_name(py.__code__, name):
            found = _shuffle_in(dev, seen)
            if found:
                return found
    return None


def dims_text(d, trailing=1):
    """(256, 1, 1) -> '256', (4, 2, 1) -> '(4, 2)': a launch's dimensions as a student writes them, the trailing
    `trailing`s dropped (0 for an index: block [3, 0, 0] -> '3')."""
    d = list(d)
    while len(d) > 1 and d[-1] == trailing:
        d.pop()
    return str(d[0]) if len(d) == 1 else "(" + ", ".join(map(str, d)) + ")"


_route = []  # the CPU executor's hook, once installed (route_launches)


def route_launches(hook):
    """Offer every launch of a simulator kernel to hook(kernel, grid, block, dynshared, args) first (course.runtime.cpu);
    it returns True when it ran the launch, False for the simulator to run it. Installed once; idempotent.

    Patches `FakeCUDAKernel.__call__` (numba_cuda/numba/cuda/simulator/kernel.py): device functions, and calls
    from inside a simulated kernel, go straight to the simulator's own code."""
    _, kernel = internals()
    if _route:
        _route[0] = hook
        return
    _route.append(hook)
    upstream = kernel.FakeCUDAKernel.__call__

    def call(self, *args):
        if self._device or kernel._kernel_context is not None:
            return upstream(self, *args)
        grid, block = kernel.normalize_kernel_dimensions(self.grid_dim, self.block_dim)
        check_launch(self.py_func.__name__, grid, block)
        refuse_shuffles(self.py_func)
        if _route[0](self, tuple(grid), tuple(block), self.dynshared_size, args):
            return None
        return upstream(self, *args)

    call._course = True
    kernel.FakeCUDAKernel.__call__ = call


def host_view(a):
    """The NumPy array behind a simulator device array (the array itself for anything else)."""
    return a._ary if isinstance(a, _fake_array()) else a


def _fake_array():
    if not _FAKE:
        _FAKE.append(internals()[1].FakeCUDAArray)
    return _FAKE[0]


_FAKE = []


_swap_lock = threading.Lock()
_swaps = {}  # id(module globals) -> [threads inside, {names that hold cuda}, the globals dict itself]


@contextlib.contextmanager
def _counted_swap(fn, fake_cuda_module):
    """The simulator's swapped_cuda_module, made robust: `cuda` in fn's module globals is the launch's fake module
    while any simulated thread is inside, the real one after the last leaves.

    numba-cuda 0.30 counts the threads inside per id(globals) (https://github.com/NVIDIA/numba-cuda/pull/690;
    0.20.1 did not count at all). Two things break that count: a thread stopped inside the swap (`_stop` raises
    _Stopped asynchronously, and it can land before the decrement), and the id of a dead globals dict reused by a
    new one (checks build a fresh copy of a kernel's globals for each simulated twin). Either leaves a count that
    never returns to 0, and every later launch from those globals then skips the swap and sees the real module:
    "module 'numba.cuda' has no attribute 'grid'" for every kernel of the module, until the process restarts.
    Here each entry keeps its dict (a reused id is a new entry), every entrance puts this launch's fake in place of
    the real module or a stale fake, and `heal_swaps` clears what stopped threads left behind. A thread that leaves
    after heal_swaps cleared its entry restores nothing (a later launch may be using that module), and a thread of
    an aborted block swaps nothing: it raises, as it would at its next barrier."""
    from numba import cuda
    K, _ = internals()
    if getattr(threading.current_thread(), "abort", False):   # a thread of a failed or stopped block
        raise RuntimeError("abort flag set on a device function call")
    g = fn.__globals__
    with _swap_lock:
        entry = _swaps.get(id(g))
        if entry is None or entry[2] is not g:
            entry = _swaps[id(g)] = [0, set(), g]
        entry[1].update(k for k, v in g.items() if v is cuda or isinstance(v, K.FakeCUDAModule))
        for k in entry[1]:
            if g.get(k) is not fake_cuda_module:
                g[k] = fake_cuda_module
        entry[0] += 1
    try:
        yield
    finally:
        with _swap_lock:
            entry[0] -= 1
            if entry[0] <= 0 and _swaps.get(id(g)) is entry:   # not once heal_swaps cleared it: a later launch's
                g.update(dict.fromkeys(entry[1], cuda))           # entry may be in place by now
                del _swaps[id(g)]


def _threads_busy():
    """Whether a simulated GPU thread is running a block now (a pooled worker not idle, or an upstream thread)."""
    _, simkernel = internals()
    worker = getattr(simkernel, "_CourseWorker", ())
    return any((not t.idle.is_set() and not t.retired) if isinstance(t, worker) else t.is_alive()
               for t in threading.enumerate() if isinstance(t, simkernel.BlockThread))


def heal_swaps():
    """With no simulated thread running (a retired one does not count), no module can still be inside a swap: put
    the real `cuda` back wherever a stopped thread left a count above 0 (see _counted_swap). Called before and
    after each launch from ordinary code, and by settle_simulator. Returns the number of entries cleared."""
    if not _swaps or _threads_busy():
        return 0
    from numba import cuda
    with _swap_lock:
        stale = list(_swaps.values())
        _swaps.clear()
        for _, names, g in stale:
            g.update(dict.fromkeys(names, cuda))
    return len(stale)


def _ignore(*args):
    pass


@contextlib.contextmanager
def instruments(fill=_ignore, atomic_add=_ignore, shared=_ignore, barrier=_ignore):
    """While active (simulator only): `fill(a)` gets every new shared and local array, `shared(a, line)` every
    new shared array with its source line, `atomic_add(index)` every `cuda.atomic.add`, `barrier(blockIdx,
    threadIdx, line)` every `cuda.syncthreads()`. The patches stay installed; outside this block they behave as
    the simulator's own code."""
    global _instrument
    patch_simulator()
    if _instrument is not None:
        raise RuntimeError("simulator instruments are already active")
    _instrument = SimpleNamespace(fill=fill, atomic_add=atomic_add, shared=shared, barrier=barrier)
    try:
        yield
    finally:
        _instrument = None


def in_kernel_thread():
    """True inside a simulated GPU thread (the simulator's BlockThread), False in ordinary Python code."""
    _, simkernel = internals()
    return isinstance(threading.current_thread(), simkernel.BlockThread)


def settle_simulator(kernel, timeout=30.0):
    """After a simulated kernel raised: wait for its aborted threads, then make sure `cuda` is real again.

    The simulator swaps `cuda` in the kernel's module globals while threads run and does not wait for the
    other threads of a failing block; until they unwind, `@cuda.jit` in that module (a notebook!) would fail."""
    import time
    K, simkernel = internals()
    deadline = time.monotonic() + timeout
    for t in threading.enumerate():
        if isinstance(t, getattr(simkernel, "_CourseWorker", ())):   # a pooled thread: until its block is done
            if not t.retired:                                       # (one _stop gave up on: not waited for)
                t.idle.wait(max(0.0, deadline - time.monotonic()))
        elif isinstance(t, simkernel.BlockThread):
            t.join(max(0.0, deadline - time.monotonic()))
    heal_swaps()
    real = sys.modules["numba.cuda"]
    g = getattr(getattr(kernel, "py_func", kernel), "__globals__", None) or {}  # a launcher may be any callable
    for k, v in list(g.items()):
        if isinstance(v, K.FakeCUDAModule):
            g[k] = real


@contextlib.contextmanager
def pretend_device(compute_capability):
    """Compile without a GPU: numba-cuda's dispatcher asks the current device for its compute capability
    (`numba.cuda.dispatcher.get_current_device`, for device functions); answer `compute_capability` meanwhile."""
    internals()
    import numba.cuda.dispatcher as dispatcher

    class NoDevice:
        pass

    NoDevice.compute_capability = compute_capability
    real = dispatcher.get_current_device
    dispatcher.get_current_device = NoDevice
    try:
        yield
    finally:
        dispatcher.get_current_device = real


def lower_kernel(pyfunc, argtypes, cc):
    """Type and lower a kernel ONCE (numba-cuda's private `_compile_pyfunc_with_fixup`, what `cuda.compile_ptx`
    runs) and return a function cc -> its PTX for that target: NVVM runs again per target on the same LLVM IR
    (the library caches each), typing and lowering, most of a compile's time, do not. `cc` is the target the
    lowering sees (numba's own lowering asks it only for cc < 6.0 and fastmath tanh at 7.5: the same IR for every
    target from sm_75 on)."""
    internals()
    from numba.cuda.compiler import _compile_pyfunc_with_fixup
    lib, _ = _compile_pyfunc_with_fixup(pyfunc, argtypes, device=False, cc=cc, abi="numba")  # as compile_ptx
    return lambda target: "\n".join(lib.get_asm_strs(cc=target))


def compile_errors():
    """The exception classes numba raises for code it cannot compile (numba-cuda's own, and numba's if present)."""
    internals()
    from numba.cuda.core import errors
    found = [errors.NumbaError]
    try:
        from numba.core.errors import NumbaError
        found.append(NumbaError)
    except ImportError:
        pass
    return tuple(found)


def numba_reason(e):
    """numba's reason for refusing code, in one line, and where: 'Unknown attribute 'dot' ... (line 6)'."""
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    skip = ("Failed in", "During:", "File ", "^", "Traceback", "- Resolution", "- Of which", "Rejected as")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    k = next((k for k, ln in enumerate(lines) if not ln.startswith(skip)), None)
    reason = type(e).__name__ if k is None else lines[k].rstrip(":")
    if k is not None and k + 1 < len(lines) and lines[k + 1].startswith(">>>"):  # the signature numba had
        reason += ": " + lines[k + 1].lstrip("> ")
    mine = [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text)
            if "site-packages" not in f and "numba" not in f.replace("\\", "/").split("/")]
    loc = getattr(e, "loc", None)  # numba's own record of the statement, when the message lacks it
    if loc is not None and getattr(loc, "line", None) and "site-packages" not in str(loc.filename):
        mine = [(loc.filename, int(loc.line))]
    return dict(reason=reason, file=mine[-1][0] if mine else None, line=mine[-1][1] if mine else None)


def float64_statements(kernel, argtypes, cc, devices=()):
    """Type and lower `kernel` for compute capability cc with `argtypes` (GPU mode; no GPU needed) and return
    [file, line, function, made] of each statement whose arithmetic (a binary or unary operator, a call) yields a
    float64, in the kernel and in `devices` (device functions it calls), and, first, with made=True, of each
    assignment of a bare literal (`acc = 0.0`) whose variable such arithmetic uses as a float64: where the float64
    came from. Raises numba's error if it cannot compile. Reads numba's typed IR: `compile_cuda`'s type annotation
    (numba_cuda/numba/cuda/compiler.py)."""
    internals()
    from numba.cuda import types
    from numba.cuda.compiler import compile_cuda
    from numba.cuda.core import ir
    cres = compile_cuda(kernel.py_func, types.void, argtypes, cc=cc)
    results = [cres] + [c for d in devices for c in d.overloads.values()]
    found = []
    for r in results:
        ann = r.type_annotation
        stmts = [s for block in ann.blocks.values() for s in block.body if isinstance(s, ir.Assign)]
        defs = {}
        for stmt in stmts:
            defs.setdefault(stmt.target.name, []).append(stmt)
        for stmt in stmts:
            if (isinstance(stmt.value, ir.Expr) and stmt.value.op in ("binop", "inplace_binop", "unary", "call")
                    and ann.typemap.get(stmt.target.name) == types.float64):
                rank = 2 if stmt.value.op == "call" else 1  # a call's float64 most often comes from an operator
                found.append((rank, stmt.loc.filename, stmt.loc.line, ann.func_id.func_name))
                for origin in _float64_literals(stmt.value, defs, ann.typemap, ir, types):
                    found.append((0, origin.loc.filename, origin.loc.line, ann.func_id.func_name))
    return [[*f[1:], f[0] == 0] for f in sorted(set(found))]  # origins, operators, calls, each in source order


def _float64_literals(expr, defs, typemap, ir, types):
    """The assignments of a bare number to a named variable (`acc = 0.0`) that reach expr's float64 operands
    through copies (numba's SSA versions `acc.1`, `acc.2`)."""
    operands = [v for v in expr.list_vars() if typemap.get(v.name) == types.float64]
    seen, out = set(), []
    while operands:
        name = operands.pop().name
        if name in seen:
            continue
        seen.add(name)
        for stmt in defs.get(name, ()):
            value = stmt.value
            if isinstance(value, ir.Var):
                operands.append(value)
            elif (isinstance(value, ir.Const) and not stmt.target.name.startswith("$")
                    and type(value.value) in (int, float)):
                out.append(stmt)
    return out


SHUFFLES = ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync")  # warp intrinsics the simulator lacks


class NotSimulable(Exception):
    """A kernel the simulator cannot run as it is written for a GPU (it calls a warp shuffle)."""


def simulated(kernel, _made=None):
    """numba-cuda's simulator's kernel for a GPU kernel (or device function), for a GPU machine: built from its
    `py_func` in a copy of its globals (and of its closure's cells) where each device function it calls is simulated
    too, so that its threads run as Python, with the simulator's bounds checks and thread order. The course's
    simulator patches (`patch_simulator`) are installed on first use. Raises NotSimulable for code that calls a
    warp shuffle (the simulator has none)."""
    import types
    _, simkernel = internals()
    patch_simulator()
    _made = {} if _made is None else _made
    py = getattr(kernel, "py_func", kernel)
    if id(py) in _made:
        return _made[id(py)]
    used = [n for n in SHUFFLES if _nested_name(py.__code__, n)]
    if used:
        raise NotSimulable(f"{py.__name__} calls cuda.{used[0]}, which numba's simulator does not have")
    g = dict(py.__globals__)
    cells = tuple(types.CellType(c.cell_contents) for c in py.__closure__ or ())  # copies: replaced below
    fn = types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, cells or None)
    device = getattr(kernel, "targetoptions", {}).get("device", False) or getattr(kernel, "_device", False)
    out = _made[id(py)] = simkernel.FakeCUDAKernel(fn, device=device)
    for name, v in py.__globals__.items():
        if type(v).__name__ == "CUDADispatcher" and _nested_name(py.__code__, name):
            g[name] = simulated(v, _made)
    for cell in cells:  # a kernel made by a function (a check's wrapper around the student's device function)
        if type(cell.cell_contents).__name__ == "CUDADispatcher":
            cell.cell_contents = simulated(cell.cell_contents, _made)
    return out


def rejit(kernel, fn):
    """A kernel (or device function) like `kernel`, with its options, around another Python function `fn`: a GPU
    dispatcher's target options, or the simulator's device, fastmath and debug flags."""
    if hasattr(kernel, "targetoptions"):
        return type(kernel)(fn, targetoptions=dict(kernel.targetoptions))
    _, simkernel = internals()
    return simkernel.FakeCUDAKernel(fn, device=kernel._device, fastmath=kernel._fastmath,
                                    extensions=getattr(kernel, "extensions", ()),
                                    debug=getattr(kernel, "_debug", False))


def _nested_name(code, name):
    """Whether code or a code object nested in it names `name`."""
    return name in code.co_names or any(_nested_name(c, name) for c in code.co_consts if hasattr(c, "co_names"))


def simulator_to_device(a):
    """The simulator's device array for a host array (FakeCUDAArray), for `simulated` kernels on a GPU machine."""
    internals()
    from numba.cuda.simulator.cudadrv.devicearray import to_device
    return to_device(a)
