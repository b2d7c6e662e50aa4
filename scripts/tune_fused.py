"""Check and time course.fused on the GPU (784-128-10, batch 64 or --batch): every mode against the NumPy twin at full size (20
steps), ms per epoch of the epoch kernel, where each microsecond of a step goes (the clocks inside the kernel,
course.epoch.clock_report), and the test accuracy after 3 epochs against the plain loop. The figures of
notebooks/results/fused-h200.json come from this script.

Usage: python scripts/tune_fused.py [--quick] [--batch=N] [--small-x=N] [--no-copies] [NAME=VALUE ...]
  --quick: no accuracy run; --batch=N: the check and the timings at batch N (default 64; above CHUNK = 64 rows,
  phase C's chunked path); --small-x=N: every batch drawn from the first N rows of X (timing only: does the
  memory behind X matter?); --no-copies: the threads stage X, as on a GPU without the TMA; NAME=VALUE sets a
  constant of course.fused before anything compiles, e.g. THREADS=256. The experiments not adopted (one barrier a
  step, X as bytes, ...) and their options can be read at commit 11407c9 (scripts/fused_*.py)."""
import sys
import time

import numpy as np
from numba import cuda

import course  # noqa: F401  (first: it picks the GPU or the simulator)
import course.epoch as epoch
import course.fused as fused

def option(name, default, least):
    """The integer N of --name=N on the command line (at least `least`), else default; bad N: one line, exit 2."""
    value = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"--{name}=")), None)
    if value is None:
        return default
    if not value.isdigit() or int(value) < least:
        print(f"tune_fused.py: --{name} takes an integer of at least {least}, got {value!r}", file=sys.stderr)
        sys.exit(2)
    return int(value)


BATCH = option("batch", 64, 1)
SMALL = option("small-x", 0, 0)
for arg in sys.argv[1:]:
    if "=" in arg and not arg.startswith("--"):
        name, value = arg.split("=")
        setattr(fused, name, int(value))
if "--no-copies" in sys.argv:
    fused.FusedTrainer.x_tiles = lambda self, X_d, perm_d, grid, nsteps: self.no_tiles
TRAINERS = {mode: lambda p, B, lr, mode=mode: fused.FusedTrainer(p, B, lr, mode=mode) for mode in fused.MODES}
from course.data import load_mnist  # noqa: E402
from course.train import fit, init_params  # noqa: E402

print("course.fused on", cuda.get_current_device().name, "| TMA bulk copies:", fused.has_tma()
      and "--no-copies" not in sys.argv, "| batch", BATCH)
X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, HIDDEN, LR = BATCH, 128, 0.1
n = (len(X) // B) * B
perm = np.random.default_rng(0).permutation(len(X))[:n]
if SMALL:
    perm = np.random.default_rng(0).integers(0, SMALL, n)
perm_d = cuda.to_device(perm)
nsteps = n // B

# 1. the same function as the NumPy twin, every mode, 20 steps at full size
steps = 20
want_losses, want = fused.sgd_epoch_ref(X, y, perm[:steps * B], init_params(HIDDEN, 0).to_host(), B, LR)
for mode, make in TRAINERS.items():
    q = init_params(HIDDEN, 0)
    losses = make(q, B, LR).epoch(X_d, y_d, perm_d[:steps * B], cuda.device_array(steps, np.float32)).copy_to_host()
    got = q.to_host()
    err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    ok = err < 1e-4 and np.allclose(losses, want_losses, atol=1e-4)
    print(f"check {mode:6s}: max |loss - twin| {np.max(np.abs(losses - want_losses)):.2e}, "
          f"max |param - twin| {err:.2e}  {'OK' if ok else 'WRONG'}")

# 2. ms per epoch: the median of 5 after a warm-up
losses = cuda.device_array(nsteps, np.float32)
trainer = list(TRAINERS.values())[-1](init_params(HIDDEN, 0), B, LR, mode="epoch")
times = []
for _ in range(6):
    t0 = time.perf_counter()
    trainer.epoch(X_d, y_d, perm_d, losses)
    cuda.synchronize()
    times.append(time.perf_counter() - t0)
ms = np.median(times[1:]) * 1e3
print(f"epoch: {ms:.2f} ms ({ms / nsteps * 1e3:.2f} us per step), blocks {trainer._blocks}, threads "
      f"{trainer.threads}, last loss {float(losses.copy_to_host()[-1]):.4f}")

# 3. the clocks
T = trainer.timed_epoch(X_d, y_d, perm_d, losses)
print(f"clocks ({len(T)} steps, {T.shape[1]} blocks; the slowest block of each part, median over the steps):")
for name, us in epoch.clock_report(T, trainer.ntiles, B).items():
    print(f"  {name:45s} {us:7.2f} us")

# 4. accuracy after 3 epochs, fused vs plain
if "--quick" not in sys.argv:
    f = fused.fit_fused(X, y, Xt, yt, epochs=3, batch_size=B, progress=False)
    p = fit(X, y, Xt, yt, epochs=3, batch_size=B, progress=False)
    fa, pa = f["epoch"][-1]["test_acc"], p["epoch"][-1]["test_acc"]
    print(f"accuracy after 3 epochs: fused {fa:.4f}, plain {pa:.4f}, within 0.5 points: {abs(fa - pa) <= 0.005}; "
          f"fused epochs {[round(e['seconds'] * 1e3, 1) for e in f['epoch']]} ms")
