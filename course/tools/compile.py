"""Compile course kernels for a real GPU (PTX for sm_90) without one: the simulator never type-checks.

Run as `COURSE_DEVICE=gpu python -m course.tools.compile`; needs NVVM (numba-cuda[cu12] brings it). Prints one line
per kernel and signature, exits 1 if any fails to compile. The kernels and their signatures are the tables of
course/tools/signatures.py, one per topic: "module:kernel" -> argument types as numba spells them ("C" layout
`[::1]` as launchers pass them, "A" layout `[:]` as the checks' guarded views do)."""
import importlib
import sys

from course.tools.signatures import all_signatures

CC = (9, 0)  # Hopper (H100/H200); PTX for it also proves the kernel types and lowers


def is_kernel(v):
    """A @cuda.jit kernel (real or simulated), not a device function."""
    if type(v).__name__ not in ("CUDADispatcher", "FakeCUDAKernel"):
        return False
    device = getattr(v, "_device", None)
    if device is None:
        device = getattr(v, "targetoptions", {}).get("device", False)
    return not device


def kernels_in(module):
    """Names of the CUDA kernels a module defines (device functions are compiled with their callers)."""
    return sorted(n for n, v in vars(module).items()
                  if is_kernel(v) and getattr(v.py_func, "__module__", None) == module.__name__)


def main():
    import course
    if course.SIMULATOR:
        print("run with COURSE_DEVICE=gpu: the simulator cannot compile", file=sys.stderr)
        return 2
    from numba import cuda, types  # noqa: F401 (types gives eval its names)
    from course.device import pretend_device
    with pretend_device(CC):  # device functions ask the current device for its compute capability
        return compile_all(cuda, types)


def compile_all(cuda, types):
    """Compile every kernel for each signature in SIGNATURES; print a line each; return 1 if any failed."""
    names = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
    failed = 0
    for key, sigs in all_signatures().items():
        modname, kname = key.split(":")
        kernel = getattr(importlib.import_module(modname), kname)
        for sig in sigs:
            try:
                argtypes = eval(f"({sig},)", {}, names)
                ptx, _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=CC)
                print(f"ok   {key}({sig}): {len(ptx.splitlines())} lines of PTX")
            except Exception as e:  # report every failure, not only the first
                failed += 1
                print(f"FAIL {key}({sig}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                print("     " + str(e).replace("\n", "\n     ")[:3000])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
