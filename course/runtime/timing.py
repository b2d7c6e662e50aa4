"""Timing GPU work honestly: warm up, synchronise, repeat, take the median."""
import time

import numpy as np
from numba import cuda, float32

import course

SIM_NOTE = "simulator: timings meaningless"  # what every simulator timing carries (label, sim_note)
CPU_NOTE = "CPU executor: CPU timings, not a GPU's"  # what every timing on the CPU executor carries
HOLD_ITERATIONS = 1_000_000  # dependent multiply-adds: about 2 ms on an H200, longer than launching fn() takes


@cuda.jit
def hold_kernel(n, sink):
    """Keep the GPU busy with n dependent multiply-adds, so that work queued behind it waits."""
    x = sink[0]  # a value the compiler cannot know, or it would fold the whole loop away
    for _ in range(n):
        x = x * float32(0.5) + float32(0.25)
    if x == float32(-12345.0):  # (almost) never true; keeps the result, and so the loop, alive
        sink[0] = x


def _note():
    """The note every time carries off the GPU: the CPU executor's while it runs the launches, else the simulator's."""
    from course.runtime.cpu import active
    return CPU_NOTE if active() else SIM_NOTE


def label(text):
    """`text` with "(simulator: timings meaningless)" appended in the simulator, "(CPU executor: CPU timings, not a
    GPU's)" on the CPU executor: for every plot title and printed line that shows a time (the simulator runs each GPU
    thread as Python code, the executor compiles them for the CPU: neither says anything about a GPU's times)."""
    return f"{text} ({_note()})" if course.SIMULATOR else text


def sim_note():
    """Print, off the GPU only, a line saying that the timings printed next are not a GPU's (before a table)."""
    if not course.SIMULATOR:
        return
    if _note() == CPU_NOTE:
        print(f"({CPU_NOTE}: the CPU executor runs the kernels as compiled CPU loops; the saved GPU run has the "
              "GPU's)")
    else:
        print(f"({SIM_NOTE}: the simulator runs each GPU thread as Python code; the saved GPU run has the real ones)")


def on_gpu(why, saved="under this cell"):
    """True on a GPU. Off it, print one line (why this cell's figures would mean nothing here, and where the saved GPU
    run's output is, the measurement) and return False: the cell then prints no figure of its own."""
    if not course.SIMULATOR:
        return True
    print(f"(no GPU: {why}. The saved GPU run's output, {saved}, is the measurement.)")
    return False


def gpu_time(fn, repeat=10, warmup=2):
    """Median milliseconds of GPU work per call of fn(), which launches GPU work.

    On a GPU: a hold kernel is queued first, then a CUDA event, fn()'s launches and another event. The
    first event runs when the hold ends, by which time fn()'s kernels are already queued, so the interval is the
    GPU's own time: Python's launch overhead (~25 us per launch) is left out. Without the hold, an idle GPU would
    run the start event at once and then wait for Python, and a 3 us kernel would read as 30 us. In the simulator
    (whose events carry no timing) a synchronised wall clock is used instead."""
    for _ in range(warmup):
        fn()  # compilation and first-touch costs stay out of the measurement
    cuda.synchronize()
    times = []
    sink = None if course.SIMULATOR else cuda.device_array(1, np.float32)
    for _ in range(repeat):
        if course.SIMULATOR:
            t0 = time.perf_counter()
            fn()
            cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        else:
            start, end = cuda.event(), cuda.event()
            hold_kernel[1, 1](HOLD_ITERATIONS, sink)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end))
    return float(np.median(times))


def wall_time(fn, repeat=10, warmup=2):
    """Median milliseconds per call of fn() by the host's clock, synchronising after each call: what a caller
    waits, launch overhead included."""
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
