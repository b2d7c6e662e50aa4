"""The lessons' PTX intrinsics and their stand-ins without a GPU, chosen in one place: `intrinsic`.

A lesson writes its intrinsic once, for the GPU (`@intrinsic`, numba-cuda's decorator on a GPU). The simulator (and
the CPU executor, which hands such kernels to it) cannot run inline PTX: there the same name is the stand-in below,
a Python function that does what the instruction does, or nothing where the simulator has no such hardware (a
cache, the TMA). The stand-ins are importable on every device, so tests can call them anywhere."""
import course

NO_TMA = "the TMA needs a GPU of compute capability 9.0 or more"
# The simulator has no warp shuffles: course.ptx's shfl_xor goes through shared memory between two block barriers,
# so there every thread of the block must join each shuffle (on a GPU, a warp with no work may skip them).
EVERY_THREAD_SHUFFLES = bool(course.SIMULATOR)


def load4(a, i):
    """a[i], a[i + 1], a[i + 2], a[i + 3]."""
    return a[i], a[i + 1], a[i + 2], a[i + 3]


def prefetch_l2(X, i, k):
    """The simulator has no cache: nothing to do."""


def no_tma(*args):
    """The simulator has no TMA (has_tma() is False there): the kernels stage X with their threads."""
    raise NotImplementedError(NO_TMA)


STAND_INS = dict(load4=load4, prefetch_l2=prefetch_l2, **dict.fromkeys(
    ("copy_init", "copy_expect", "copy_tile", "copy_fence", "copy_fence_global", "copy_done"), no_tma))


def intrinsic(fn):
    """numba-cuda's @intrinsic on a GPU; in the simulator, the stand-in of the same name (STAND_INS)."""
    if not course.SIMULATOR:
        from numba.cuda.extending import intrinsic as numba_intrinsic
        return numba_intrinsic(fn)
    if fn.__name__ not in STAND_INS:
        raise NotImplementedError(f"intrinsic {fn.__name__} has no stand-in for the simulator: add one to "
                                  "course/runtime/intrinsics.py")
    return STAND_INS[fn.__name__]
