"""Small helpers every launcher shares: grid arithmetic and argument checks with clear errors; and whether the code
runs in a notebook."""
import sys

import numpy as np


def cdiv(a, b):
    """Ceiling division: the number of blocks of b threads needed to cover a elements."""
    return (a + b - 1) // b


def require(name, a, dtype=None, ndim=None, shape=None):
    """Raise ValueError unless `a` is a C-contiguous device array with this dtype, ndim and shape.

    A kernel trusts its arguments completely, so a wrong one corrupts memory instead of failing:
    launchers call this first. `dtype` may be a tuple of allowed dtypes; None in `shape` matches any size."""
    if isinstance(a, np.ndarray) or not hasattr(a, "copy_to_host"):
        raise ValueError(f"{name} must be a device array (use cuda.to_device), got {type(a).__name__}")
    if dtype is not None:
        allowed = tuple(np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,)))
        if a.dtype not in allowed:
            raise ValueError(f"{name} must have dtype {' or '.join(map(str, allowed))}, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(a.shape)}")
    if shape is not None and (len(shape) != a.ndim or any(s is not None and s != n for s, n in zip(shape, a.shape))):
        want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(a.shape)}")
    if not a.is_c_contiguous():
        raise ValueError(f"{name} must be C-contiguous (a slice with steps or a transpose is not): "
                         "copy it into a fresh device array first")
    return a


def _span(a):
    """[first, last + 1) byte addresses of a C-contiguous array: its device pointer, or host memory in the simulator."""
    pointer = getattr(a, "device_ctypes_pointer", None)            # a real device array: cheap
    start = (pointer.value or 0) if pointer is not None else a.__array_interface__["data"][0]  # the simulator's numpy
    return start, start + a.size * a.dtype.itemsize


def require_apart(outputs, **inputs):
    """Raise ValueError if an output shares memory with an input or with another output.

    `outputs`: {name: array}; `inputs`: name=array (None is skipped). A kernel reads its inputs while other threads
    write its outputs: an output over an input gives wrong numbers, silently. Launchers call this after `require`
    (which makes the arrays contiguous, so a span is exact)."""
    seen = [(name, _span(a)) for name, a in inputs.items() if a is not None]
    for name, out in outputs.items():
        lo, hi = _span(out)
        for other, (a_lo, a_hi) in seen:
            if lo < a_hi and a_lo < hi:
                raise ValueError(f"{name} and {other} share memory: an output must not overlap "
                                 f"{'another output' if other in outputs else 'an input'} (pass a separate array)")
        seen.append((name, (lo, hi)))


MAX_GRID_Y = 65_535  # the most blocks a grid may have in y (and z) on every CUDA GPU; x allows 2**31 - 1


def grid2d(cols, rows, block):
    """The 2-D grid of `block`s that covers cols x rows threads (x the columns, y the rows); ValueError where a GPU
    would refuse the launch (more than MAX_GRID_Y blocks in y)."""
    grid = (cdiv(cols, block[0]), cdiv(rows, block[1]))
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"{rows:,} rows need {grid[1]:,} blocks of {block[1]} rows in y, more than a GPU's "
                         f"{MAX_GRID_Y:,}: split the rows into launches of at most {MAX_GRID_Y * block[1]:,}")
    return grid


def in_notebook():
    """True in a Jupyter kernel (a notebook run in JupyterLab, by `python -m course execute` or by nbgrader)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)  # Colab's shell is a subclass


NUMBERS = (bool, int, float, np.number)  # a launch argument typed by its Python type alone


class Specialized:
    """`kernel[grid, block, stream](*args)`, typed once per set of arrays instead of at every launch: numba-cuda
    types a tuple argument (a namedtuple of device arrays) in Python at each launch, flat arrays in C, about 7 times
    faster (scripts/launch_typing.py; the namedtuples' typing takes longer than a launch). Keeps numba-cuda's
    `kernel.specialize(*args)` (compiled once per signature) while the same arrays, and numbers of the same types,
    come back: then a launch skips the dispatcher's lookup. The simulator's kernel specializes to itself."""

    def __init__(self, kernel):
        self.kernel, self._key, self._held, self._typed = kernel, None, (), None

    def typed(self, args):
        """The kernel specialized for args' types (typed again only when an array or a number's type changed)."""
        key = tuple(type(x) if isinstance(x, NUMBERS) else id(x)
                    for a in args for x in (a if isinstance(a, tuple) else (a,)))
        if key != self._key:
            self._typed, self._key, self._held = self.kernel.specialize(*args), key, args  # held: ids stay theirs
        return self._typed

    def compiled(self, args):
        """The compiled kernel for args (numba-cuda's, for max_cooperative_grid_blocks; a GPU only)."""
        return next(iter(self.typed(args).overloads.values()))

    def __getitem__(self, config):
        return lambda *args: self.typed(args)[config](*args)
