"""Time course.fused's per-epoch kernel for several block sizes and grid sizes on the GPU (784-128-10, batch 64).

Usage: python scripts/tune_fused.py   (prints one line per configuration: median ms per epoch of 3)"""
import time

import numpy as np
from numba import cuda

import course
from course.data import load_mnist
from course.fused import FusedTrainer
from course.train import init_params

X, y, _, _ = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B = 64
n = (len(X) // B) * B
perm_d = cuda.to_device(np.random.default_rng(0).permutation(len(X))[:n])
losses = cuda.device_array(n // B, np.float32)
for mode in ("epoch", "step"):
    for threads in (128, 256, 512):
        for blocks in (None, 64, 32):
            if mode == "step" and blocks is not None:
                continue
            try:
                trainer = FusedTrainer(init_params(128, 0), B, 0.1, mode=mode, threads=threads, blocks=blocks)
                times = []
                for _ in range(4):
                    t0 = time.perf_counter()
                    trainer.epoch(X_d, y_d, perm_d, losses)
                    cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                last = float(losses.copy_to_host()[-1])
                grid = trainer._blocks
                print(f"{mode:5s} threads {threads:3d} blocks {str(grid):>4s}: {np.median(times[1:]) * 1e3:7.1f} ms "
                      f"per epoch (last loss {last:.4f})")
            except Exception as e:  # report and go on with the next configuration
                print(f"{mode:5s} threads {threads:3d} blocks {blocks}: {type(e).__name__}: {str(e)[:150]}")
