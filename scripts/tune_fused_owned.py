"""Check and time the experiments scripts/fused_owned.py (block j owns hidden units, one grid barrier per step) and
scripts/fused_split.py (2-D tiles of W1, two barriers per step) on the GPU (784-128-10, batch 64): every mode
against the NumPy twin at full size (20 steps), ms per epoch of the epoch kernel for a few block sizes, the GPU
time of each phase alone (a CUDA graph of 200 launches of one phase, replayed), and the test accuracy after 3
epochs against the plain loop.

Usage: python scripts/tune_fused_owned.py [--module=fused_split] [--quick] [--fast] [--no-phases] [NAME=VALUE ...]
  --quick: no accuracy run; --fast: the module's THREADS and BLOCKS only, no check against the twin;
  --no-phases: no phase-alone graphs; NAME=VALUE sets a constant of the module before anything compiles, e.g.
  UNROLL=16, or fused_split's SKIP=4 (timing only: skips a part of the step, the results are wrong)."""
import sys
import time

import numpy as np
from numba import cuda

import course
import importlib
MODULE = next((a.split("=")[1] for a in sys.argv[1:] if a.startswith("--module=")), "fused_owned")
fused = importlib.import_module(MODULE)    # scripts/ is on sys.path when this script runs

for arg in sys.argv[1:]:
    if "=" in arg and not arg.startswith("--"):
        name, value = arg.split("=")
        setattr(fused, name, int(value))
print(MODULE, "constants:", {k: getattr(fused, k) for k in ("UNROLL", "THREADS", "BLOCKS", "COLS_MAX", "REGS")})
print("GPU:", cuda.get_current_device().name)
from course.data import load_mnist
FusedTrainer, fit_fused, sgd_epoch_ref = fused.FusedTrainer, fused.fit_fused, fused.sgd_epoch_ref
from course.train import fit, init_params

X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, HIDDEN, LR = 64, 128, 0.1
n = (len(X) // B) * B
perm = np.random.default_rng(0).permutation(len(X))[:n]
perm_d = cuda.to_device(perm)

# 1. the same function as the NumPy twin, every mode, 20 steps at full size
steps = 20
want_losses, want = sgd_epoch_ref(X, y, perm[:steps * B], init_params(HIDDEN, 0).to_host(), B, LR)
for mode in () if "--fast" in sys.argv else ("phases", "step", "epoch"):
    q = init_params(HIDDEN, 0)
    losses = FusedTrainer(q, B, LR, mode=mode).epoch(X_d, y_d, perm_d[:steps * B],
                                                    cuda.device_array(steps, np.float32)).copy_to_host()
    got = q.to_host()
    err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    ok = err < 1e-4 and np.allclose(losses, want_losses, atol=1e-4)
    print(f"check {mode:6s}: max |loss - twin| {np.max(np.abs(losses - want_losses)):.2e}, "
          f"max |param - twin| {err:.2e}  {'OK' if ok else 'WRONG'}")

# 2. ms per epoch
losses = cuda.device_array(n // B, np.float32)
for threads in ((fused.THREADS,) if "--fast" in sys.argv else (256, 512, 1024)):
    for blocks in ((fused.BLOCKS,) if "--fast" in sys.argv else (128, 64)):
        try:
            trainer = FusedTrainer(init_params(HIDDEN, 0), B, LR, mode="epoch", threads=threads, blocks=blocks)
        except ValueError as e:              # e.g. COLS_MAX=1 with fewer blocks than hidden units
            print(f"epoch threads {threads:3d} blocks {blocks:4d}: skipped ({e})")
            continue
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            trainer.epoch(X_d, y_d, perm_d, losses)
            cuda.synchronize()
            times.append(time.perf_counter() - t0)
        print(f"epoch threads {threads:3d} blocks {str(trainer._blocks):>4s}: {np.median(times[1:]) * 1e3:7.2f} ms "
              f"per epoch, {np.median(times[1:]) / (n // B) * 1e6:6.2f} us per step (last loss "
              f"{float(losses.copy_to_host()[-1]):.4f})")

# 3. each phase alone: a graph of `reps` launches of it, replayed once
from course.graphs import Graph, graph_support
if graph_support() is None and "--no-phases" not in sys.argv:
    trainer = FusedTrainer(init_params(HIDDEN, 0), B, LR, mode="phases")
    ix, loss1 = cuda.to_device(perm[:B]), cuda.to_device(np.zeros(1, np.float32))
    reps = 200
    for phase, name in enumerate(getattr(fused, "PHASE_NAMES", ("forward", "backward + update")), 1):
        def launches(s, phase=phase):
            for _ in range(reps):
                trainer.launch_phases(X_d, y_d, ix, 0, loss1, s, phases=(phase,))
        launches(0)
        g = Graph(launches)
        g.replay(); g.synchronize()
        t0 = time.perf_counter()
        g.replay(); g.synchronize()
        print(f"phase {phase} ({name}), grid {trainer.phase_grids()[phase - 1]}: "
              f"{(time.perf_counter() - t0) / reps * 1e6:6.2f} us")

# 4. accuracy after 3 epochs, fused vs plain
if "--quick" not in sys.argv:
    f = fit_fused(X, y, Xt, yt, epochs=3, progress=False)
    p = fit(X, y, Xt, yt, epochs=3, progress=False)
    fa, pa = f["epoch"][-1]["test_acc"], p["epoch"][-1]["test_acc"]
    print(f"accuracy after 3 epochs: fused {fa:.4f}, plain {pa:.4f}, within 0.5 points: {abs(fa - pa) <= 0.005}; "
          f"fused epochs {[round(e['seconds'] * 1e3, 1) for e in f['epoch']]} ms")
