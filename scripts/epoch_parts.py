"""Where the fused epoch's milliseconds go besides the kernel's steps (GPU only): CUDA events around the launches of
FusedTrainer.epoch (the zeroing launch, then the cooperative kernel), the host's time to issue them, the epoch with
the permutation uploaded inside the clock (cuda.to_device, or fit_fused's pinned buffer copied without a wait), and
fit_fused's epochs (what `python -m course bench` times). Usage: python scripts/epoch_parts.py"""
import time

import numpy as np
from numba import cuda

import course  # noqa: F401  (first: it picks the GPU or the simulator)
import course.fused as fused
from course.data import load_mnist
from course.train import init_params
from course.runtime.util import cdiv

X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, HIDDEN, LR = 64, 128, 0.1
n = (len(X) // B) * B
nsteps = n // B
perms = [np.random.default_rng(s).permutation(len(X))[:n] for s in range(6)]
perm_d = cuda.to_device(perms[0])
losses = cuda.device_array(nsteps, np.float32)
tr = fused.FusedTrainer(init_params(HIDDEN, 0), B, LR, mode="epoch")
tr.epoch(X_d, y_d, perm_d, losses)
cuda.synchronize()


def median(f, k=6):
    """The median of f(i) for i = 1 .. k - 1 (the first call is a warm-up); f returns a list of figures."""
    return np.median(np.array([f(i) for i in range(k)][1:]), axis=0)


def events(i):
    ev = [cuda.event() for _ in range(3)]
    ev[0].record()
    fused.zero_kernel[cdiv(nsteps, 256), 256](losses)
    args = tr._args(X_d, y_d, perm_d, 0, nsteps, losses, tr.no_clocks)
    grid = tr.grid(args)
    args = tr._args(X_d, y_d, perm_d, 0, nsteps, losses, tr.no_clocks, tr.x_tiles(X_d, perm_d, grid, nsteps))
    ev[1].record()
    tr.typed[fused.fused_steps_kernel][grid, tr.threads](*args)   # typed at the warm-up only, as in epoch()
    ev[2].record()
    ev[2].synchronize()
    return [cuda.event_elapsed_time(ev[0], ev[1]), cuda.event_elapsed_time(ev[1], ev[2])]


def issue(i):
    cuda.synchronize()
    t0 = time.perf_counter()
    tr.epoch(X_d, y_d, perm_d, losses)
    t1 = time.perf_counter()
    cuda.synchronize()
    return [(t1 - t0) * 1e3, (time.perf_counter() - t0) * 1e3]


def to_device(i):
    cuda.synchronize()
    t0 = time.perf_counter()
    tr.epoch(X_d, y_d, cuda.to_device(perms[i]), losses)
    cuda.synchronize()
    return [(time.perf_counter() - t0) * 1e3]


perm_h, perm_k = cuda.pinned_array(n, np.int64), cuda.device_array(n, np.int64)


def pinned(i):
    cuda.synchronize()
    t0 = time.perf_counter()
    perm_h[:] = perms[i]
    perm_k.copy_to_device(perm_h, stream=cuda.default_stream())
    tr.epoch(X_d, y_d, perm_k, losses)
    cuda.synchronize()
    return [(time.perf_counter() - t0) * 1e3]


z, k = median(events)
print(f"CUDA events (ms): zeroing launch and the host's work before the kernel {z:.3f}, fused kernel {k:.3f}")
a, b = median(issue)
print(f"trainer.epoch, the permutation on the GPU: issued in {a:.3f} ms, done in {b:.3f} ms")
print(f"the permutation uploaded inside the clock: cuda.to_device {median(to_device)[0]:.3f} ms, "
      f"pinned and copied without a wait (fit_fused) {median(pinned)[0]:.3f} ms")
h = fused.fit_fused(X, y, Xt, yt, epochs=4, progress=False)
print("fit_fused's epochs (ms):", [round(e["seconds"] * 1e3, 2) for e in h["epoch"]])
