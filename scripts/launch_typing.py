"""The host's cost per launch of typing course.fused's kernel arguments (the figures in course.runtime.util.Specialized's
docstring and the report of issue 49, item 3): the 18 arguments flat (numba-cuda's C dispatcher types device arrays),
the same in course.fused's namedtuples (typed in Python at every launch), and through Specialized (typed once per
set of arrays). Needs no GPU: `COURSE_DEVICE=gpu NUMBA_ENABLE_CUDASIM=0 python scripts/launch_typing.py` compiles
two empty kernels with those arguments and times everything up to the launch (numba-cuda's context and module
loading are stubbed out, as nothing launches). On 2026-12-07, 2 busy cores, three runs: flat 5.0-6.3,
namedtuples 36-49, Specialized 4.2-5.0 us per launch."""
import timeit
from types import SimpleNamespace

import numpy as np

import course  # noqa: F401  (first: it chooses the device)
import numba.cuda.cudadrv.devices as devices
import numba.cuda.dispatcher as dispatcher
from numba import cuda
from numba.cuda.cudadrv.devicearray import DeviceNDArray

from course.fused import Acts, Batch, Momentum, Steps, Weights
from course.runtime.device import pretend_device
from course.runtime.util import Specialized

N = 20_000  # launches timed, best of 5


def no_gpu():
    """Compile without a GPU and never load the module: nothing here launches."""
    devices.get_context = lambda devnum=0: SimpleNamespace(device=SimpleNamespace(compute_capability=(9, 0)))
    dispatcher._Kernel.bind = lambda self: None


def device_array(shape, dtype):
    """A device array's Python object (numba types it as a launch would), with no memory behind it."""
    strides = np.empty(shape, dtype).strides
    return DeviceNDArray(shape, strides, np.dtype(dtype), gpu_data=object())


@cuda.jit
def flat_kernel(X, y, perm, W1, b1, W2, b2, Z, H, dZ2, dH, step0, nsteps, lr, losses, T, bar, Xt):
    pass


@cuda.jit
def tuple_kernel(data, w, acts, steps, bar, Xt):
    pass


def main():
    no_gpu()
    f32 = np.float32
    data = Batch(device_array((60000, 784), f32), device_array((60000,), np.int64), device_array((59968,), np.int64))
    w = Weights(device_array((784, 128), f32), device_array((128,), f32), device_array((128, 10), f32),
                device_array((10,), f32))
    acts = Acts(*(device_array((64, n), f32) for n in (128, 128, 10, 128)))
    m = Momentum(f32(0.0), False, device_array((0, 0), f32), device_array((0,), f32), device_array((0, 0), f32),
                 device_array((0,), f32))                                  # plain SGD: no velocities
    losses, T = device_array((937,), f32), device_array((1, 1, 16), np.uint64)
    bar, Xt = device_array((1,), np.uint64), device_array((1, 100), f32)
    flat = (*data, *w, *acts, 0, 937, f32(0.1), losses, T, bar, Xt)

    def tupled():
        return Batch(*data), w, acts, Steps(0, 937, f32(0.1), m, losses, T), bar, Xt

    def lookup(kernel, config, args):
        """What a launch does before launching: numba-cuda's dispatcher finds the kernel for args' types."""
        return dispatcher._dispatcher.Dispatcher._cuda_call(kernel, *args, **{dispatcher._LAUNCH_CONFIG_KW: config})

    with pretend_device((9, 0)):
        flat_config, tuple_config = flat_kernel[1, 32], tuple_kernel[1, 32]
        lookup(flat_kernel, flat_config, flat), lookup(tuple_kernel, tuple_config, tupled())   # compiled once
        once = Specialized(tuple_kernel)
        once.typed(tupled())
        for name, f in [("flat arrays", lambda: lookup(flat_kernel, flat_config, flat)),
                        ("namedtuples", lambda: lookup(tuple_kernel, tuple_config, tupled())),
                        ("namedtuples, Specialized", lambda: once.typed(tupled()))]:
            best = min(timeit.repeat(f, number=N, repeat=5)) / N * 1e6
            print(f"{name:26s} {best:6.2f} us per launch")
    assert len(flat_kernel.overloads) == len(tuple_kernel.overloads) == 1   # typed, never compiled again


if __name__ == "__main__":
    main()
