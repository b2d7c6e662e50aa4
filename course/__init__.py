"""GPU training from scratch: the course's shared package. Importing it picks the GPU or the simulator."""
import sys as _sys

from .device import setup as _setup

SIMULATOR, WHY = _setup()
if SIMULATOR:
    from .device import patch_simulator as _patch

    _patch()
    print(f"course: CUDA simulator ({WHY}); notebooks shrink their data. "
          "Set COURSE_DEVICE=gpu to insist on a GPU.", file=_sys.stderr)


def pick(gpu, sim):
    """Return `gpu` on a real GPU and `sim` in the simulator (e.g. a data size)."""
    return sim if SIMULATOR else gpu


def info():
    """Print and return the device the kernels run on."""
    from .device import describe, info_line
    d = describe(SIMULATOR)
    print(info_line(d))
    return d
