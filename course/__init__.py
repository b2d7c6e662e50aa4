"""GPU training from scratch: the course's package. Importing it picks the GPU, the CPU executor or the simulator."""
import os as _os
import sys as _sys

from .runtime import versions as _versions
from .runtime.device import setup as _setup

# `python -m course ...` reports a bad COURSE_DEVICE (and the simulator's banner) only in the commands that use a
# device, so that --help, download or export still work and errors stay one line.
_ARGV = getattr(_sys, "orig_argv", [])
_CLI = any(a == "-m" and b == "course" for a, b in zip(_ARGV, _ARGV[1:])) or "-mcourse" in _ARGV
DEVICE_ERROR = None
try:
    SIMULATOR, WHY = _setup()
except ValueError as _e:  # COURSE_DEVICE is not gpu, sim or auto
    if not _CLI:
        raise
    SIMULATOR, WHY, DEVICE_ERROR = None, None, str(_e)
# A Python, numba or numpy outside the tested ranges (course/runtime/versions.py): one line each on stderr. A warning, not
# an error: the course may still work (and `python -m course doctor` must run to explain it), except numpy >= 2.5
# on a GPU, where numba-cuda's first compile fails: an error at once instead of a traceback inside numba.
VERSION_ERROR = _versions.fatal(SIMULATOR) if SIMULATOR is not None else None
if VERSION_ERROR and not _CLI:
    raise RuntimeError(VERSION_ERROR)
if not _CLI:
    _versions.warn_at_import()
from .runtime import cpu  # noqa: E402  (cpu.simulating() is a no-op on a GPU, where launches are numba's own)

CPU = False  # True when launches run on the CPU executor (course/runtime/cpu.py): COURSE_DEVICE=cpu, or no GPU
if SIMULATOR:
    from .runtime.device import executor_wanted as _executor_wanted
    from .runtime.device import patch_simulator as _patch

    try:
        _patch()
    except (RuntimeError, ImportError) as _e:  # no numba, or a numba-cuda course/runtime/device.py was not written for
        if not _CLI:
            raise
        DEVICE_ERROR = " ".join(str(_e).split())  # `python -m course doctor` explains it; other commands stop
    else:
        CPU = _executor_wanted(SIMULATOR)
        cpu.enable(CPU)


def _banner_stream():
    """stdout in a Jupyter kernel (JupyterLab paints stderr red, as an error; this is news), else stderr (a script's
    or a command's stdout is its results)."""
    shell = _sys.modules.get("IPython") and _sys.modules["IPython"].get_ipython()
    jupyter = any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)  # Colab's is a subclass
    return _sys.stdout if jupyter else _sys.stderr


def banner():
    """Say where kernels run without a GPU (on `import course`; the command line prints it itself)."""
    if CPU:
        print(f"course: CPU executor ({WHY}): kernels compiled for the CPU by numba, the exercise checks in the "
              "CUDA simulator. COURSE_DEVICE=sim runs everything in the simulator, gpu insists on a GPU.",
              file=_banner_stream())
    elif SIMULATOR:
        print(f"course: CUDA simulator ({WHY}); notebooks shrink their data. "
              "Set COURSE_DEVICE=gpu to insist on a GPU.", file=_banner_stream())


if not _CLI:
    banner()


SIZES = "COURSE_SIZES"  # "sim": the CPU executor takes the simulator's sizes (the test suite: same proof, less time)


def pick(gpu, sim, cpu=None):
    """Return `gpu` on a real GPU, `cpu` on the CPU executor (`sim` when not given, or when COURSE_SIZES=sim) and
    `sim` in the simulator (e.g. a data size)."""
    if not SIMULATOR:
        return gpu
    small = _os.environ.get(SIZES, "") == "sim"
    return cpu if cpu is not None and _on_executor() and not small else sim


def _on_executor():
    from .runtime.cpu import active
    return active()


RUNS_ON = {"gpu": "the GPU", "cpu": "the CPU executor (kernels compiled for the CPU by numba)",
           "sim": "numba's CUDA simulator"}


def runs_on():
    """Where a kernel launched now runs: "gpu", "cpu" (the CPU executor) or "sim" (numba's CUDA simulator)."""
    if not SIMULATOR:
        return "gpu"
    return "cpu" if _on_executor() else "sim"


def info():
    """Print and return the device the kernels run on, and one line on the versions (or their first problem)."""
    from .runtime.device import describe, info_line
    from .runtime.doctor import version_summary
    d = describe(SIMULATOR)
    print(info_line(d))
    print(version_summary())
    return d


def use_mine(*args, **kwargs):
    """Run your passing exercise solutions in place of the course's kernels; print whose code runs where."""
    from .runtime.mine import use_mine
    return use_mine(*args, **kwargs)
