"""Choose, once and before numba is imported, between a real CUDA GPU and numba's CUDA simulator."""
import ctypes
import os
import sys

ENV = "COURSE_DEVICE"  # "gpu", "sim" or "auto" (default)


def _gpu_count():
    """Number of CUDA devices the driver reports (0 when there is no driver), without importing numba."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return 0
    count = ctypes.c_int(0)
    try:
        if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
    except AttributeError:
        return 0
    return count.value


def _choose():
    """Return (simulator: bool, why: str) from COURSE_DEVICE, NUMBA_ENABLE_CUDASIM or the hardware."""
    want = os.environ.get(ENV, "auto").strip().lower()
    if want not in ("auto", "gpu", "sim"):
        raise ValueError(f"{ENV}={want!r}: use 'gpu', 'sim' or 'auto'")
    if want == "gpu":
        return False, f"{ENV}=gpu"
    if want == "sim":
        return True, f"{ENV}=sim"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0"):
        return True, "NUMBA_ENABLE_CUDASIM is set"
    n = _gpu_count()
    if n > 0:
        return False, f"the CUDA driver reports {n} device(s)"
    return True, "no CUDA driver or device was found"


def setup():
    """Decide the mode, set NUMBA_ENABLE_CUDASIM to match, and return (simulator, why)."""
    simulator, why = _choose()
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if simulator else "0"
    # Low-occupancy warnings are noise for the small teaching launches; keep the others (host copies).
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    _match_numba_config(simulator)
    return simulator, why


def _match_numba_config(simulator):
    """Make numba's config agree with the choice if numba was imported before course (it read the setting then).

    After `import numba` alone, numba.cuda has not chosen yet: re-reading the environment is enough. After
    `import numba.cuda` in the other mode it is too late: RuntimeError, saying what to do."""
    if "numba.core.config" not in sys.modules:
        return
    from numba.core import config  # numba.cuda.core.config is this same module
    if bool(config.ENABLE_CUDASIM) != simulator and "numba.cuda" not in sys.modules:
        config.reload_config()
    if bool(config.ENABLE_CUDASIM) != simulator:
        first = "numba.cuda" if "numba.cuda" in sys.modules else "numba"
        raise RuntimeError(
            f"{first} was imported before course, in the other mode (NUMBA_ENABLE_CUDASIM="
            f"{int(config.ENABLE_CUDASIM)}): put `import course` first (restart the kernel), or set COURSE_DEVICE.")


def describe(simulator):
    """A dict describing the device the kernels run on."""
    from numba import cuda
    if simulator:
        return {"mode": "simulator", "name": "numba CUDA simulator (no GPU; kernels run as Python threads)"}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    free, total = cuda.current_context().get_memory_info()
    return {"mode": "gpu", "name": name, "compute_capability": "%d.%d" % dev.compute_capability,
            "sms": dev.MULTIPROCESSOR_COUNT, "memory_gib": round(total / 2**30, 1)}


def info_line(d):
    """One line for humans from describe()'s dict."""
    if d["mode"] == "simulator":
        return f"device: {d['name']}"
    return (f"device: {d['name']} (compute capability {d['compute_capability']}, "
            f"{d['sms']} SMs, {d['memory_gib']} GiB)")


def harden_simulator():
    """Make the simulator's shared-array allocation thread-safe (called once, in simulator mode).

    numba's simulator runs each GPU thread as a Python thread and creates a shared array the first time one of
    them reaches its line, without a lock: inside a Jupyter kernel two threads of a block sometimes both create
    it and then work on separate copies, so a correct kernel fails now and then. Same lookup, under a lock."""
    import sys
    import threading

    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator import kernelapi
    original = kernelapi.FakeCUDAShared.array
    if getattr(original, "_course_locked", False):
        return
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory, alignment: the simulator's own path
            return original(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key: the line that asks
        with lock:
            a = self._allocations.get(key)
            if a is None:
                dt = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                import numpy as np
                a = self._allocations[key] = np.empty(shape, dt)
        return a

    array._course_locked = True
    kernelapi.FakeCUDAShared.array = array
