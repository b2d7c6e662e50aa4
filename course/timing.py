"""Timing GPU work honestly: warm up, synchronise, repeat, take the median."""
import time

import numpy as np
from numba import cuda

import course


def gpu_time(fn, repeat=10, warmup=2):
    """Median milliseconds per call of fn(), which launches GPU work.

    On a GPU, CUDA events recorded on the stream around each call measure device time; in the simulator
    (whose events carry no timing) a synchronised wall clock is used instead."""
    for _ in range(warmup):
        fn()  # compilation and first-touch costs stay out of the measurement
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        if course.SIMULATOR:
            t0 = time.perf_counter()
            fn()
            cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        else:
            start, end = cuda.event(), cuda.event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end))
    return float(np.median(times))


def wall_time(fn, repeat=10, warmup=2):
    """Median milliseconds per call of fn() by the host's clock, synchronising after each call."""
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))
