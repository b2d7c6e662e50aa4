"""Check and time scripts/fused_tiles.py on the GPU (784-128-10, batch 64): every mode against the NumPy twin (20
steps), ms per epoch, and where each microsecond of a step goes by the clocks inside the kernel.

Usage: python scripts/tune_fused_tiles.py [--module=NAME] [--quick] [NAME=VALUE ...]  (NAME=VALUE sets a constant)"""
import importlib
import sys
import time

import numpy as np
from numba import cuda

import course  # noqa: F401
MODULE = next((a.split("=")[1] for a in sys.argv[1:] if a.startswith("--module=")), "fused_tiles")
F = importlib.import_module(MODULE)
for arg in sys.argv[1:]:
    if "=" in arg and not arg.startswith("--"):
        name, value = arg.split("=")
        setattr(F, name, int(value))
from course.data import load_mnist  # noqa: E402
from course.train import init_params  # noqa: E402

print(MODULE, "on", cuda.get_current_device().name)
X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, HIDDEN, LR = 64, 128, 0.1
n = (len(X) // B) * B
perm = np.random.default_rng(0).permutation(len(X))[:n]
SMALL = next((int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("--small-x=")), 0)
if SMALL:                                      # timing experiment: every batch from the first SMALL rows of X
    perm = np.random.default_rng(0).integers(0, SMALL, n)
perm_d = cuda.to_device(perm)
nsteps = n // B

steps = 20
want_losses, want = F.sgd_epoch_ref(X, y, perm[:steps * B], init_params(HIDDEN, 0).to_host(), B, LR)
for mode in ("phases", "step", "epoch"):
    q = init_params(HIDDEN, 0)
    losses = F.FusedTrainer(q, B, LR, mode=mode).epoch(X_d, y_d, perm_d[:steps * B],
                                                      cuda.device_array(steps, np.float32)).copy_to_host()
    got = q.to_host()
    err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    ok = err < 1e-4 and np.allclose(losses, want_losses, atol=1e-4)
    print(f"check {mode:6s}: max |loss - twin| {np.max(np.abs(losses - want_losses)):.2e}, "
          f"max |param - twin| {err:.2e}  {'OK' if ok else 'WRONG'}")

losses = cuda.device_array(nsteps, np.float32)
trainer = F.FusedTrainer(init_params(HIDDEN, 0), B, LR, mode="epoch")
times = []
for _ in range(6):
    t0 = time.perf_counter()
    trainer.epoch(X_d, y_d, perm_d, losses)
    cuda.synchronize()
    times.append(time.perf_counter() - t0)
ms = np.median(times[1:]) * 1e3
print(f"epoch: {ms:.2f} ms ({ms / nsteps * 1e3:.2f} us per step), blocks {trainer._blocks}, threads "
      f"{trainer.threads}, last loss {float(losses.copy_to_host()[-1]):.4f}")

nb = trainer._blocks
T_d = cuda.to_device(np.zeros((nsteps, nb, F.NPOINTS), np.uint64))
trainer.epoch(X_d, y_d, perm_d, losses, clocks=T_d)
cuda.synchronize()
T = T_d.copy_to_host().astype(np.int64)
T = T[10:-1]                                   # steady state
t0 = T[:, :, 0]
period = np.diff(t0.min(axis=1))
nt_ = F.ntiles_of(X.shape[1], HIDDEN)
parts = {
    "A (max over blocks)": (T[:, :, 1] - T[:, :, 0]).max(axis=1),
    "A (median block)": np.median(T[:, :, 1] - T[:, :, 0], axis=1),
    "barrier 1: last arrival -> first release": T[:, :, 2].min(axis=1) - T[:, :, 1].max(axis=1),
    "barrier 1: first arrival -> last release": T[:, :, 2].max(axis=1) - T[:, :, 1].min(axis=1),
    "B (max over blocks)": (T[:, :, 3] - T[:, :, 2]).max(axis=1),
    "B (median block)": np.median(T[:, :, 3] - T[:, :, 2], axis=1),
    "barrier 2: last arrival -> first release": T[:, :, 4].min(axis=1) - T[:, :, 3].max(axis=1),
    "C (max over blocks)": (T[:, :, 5] - T[:, :, 4]).max(axis=1),
    "C (median block)": np.median(T[:, :, 5] - T[:, :, 4], axis=1),
    "C end -> next A start (max)": (T[1:, :, 0] - T[:-1, :, 5]).max(axis=1),
    "step period (first block's start)": period,
    "A: rows staged": (T[:, :, 6] - T[:, :, 0]).max(axis=1),
    "A: W staged": (T[:, :nt_, 15] - T[:, :nt_, 6]).max(axis=1),
    "A: X staged": (T[:, :nt_, 7] - T[:, :nt_, 15]).max(axis=1),
    "A: partial sums": (T[:, :, 8] - T[:, :, 7]).max(axis=1),
    "A: added into Z": (T[:, :F.ntiles_of(X.shape[1], HIDDEN), 1] - T[:, :F.ntiles_of(X.shape[1], HIDDEN), 8]).max(axis=1),
    "B: H row (rows' blocks)": (T[:nb, :64, 9] - T[:nb, :64, 2]).max(axis=1) if False else (T[:, :64, 9] - T[:, :64, 2]).max(axis=1),
    "B: logits": (T[:, :64, 10] - T[:, :64, 9]).max(axis=1),
    "B: softmax, dZ2, dH": (T[:, :64, 3] - T[:, :64, 10]).max(axis=1),
    "C: W2, b1, b2": (T[:, :, 11] - T[:, :, 4]).max(axis=1),
    "C: dH staged": (T[:, :nt_, 12] - T[:, :nt_, 11]).max(axis=1),
    "C: dW1 sums": (T[:, :nt_, 13] - T[:, :nt_, 12]).max(axis=1),
    "C: W1 updated": (T[:, :nt_, 14] - T[:, :nt_, 13]).max(axis=1),

}
print(f"clocks ({len(T)} steps, {nb} blocks; medians over steps, microseconds; globaltimer resolution: smallest "
      f"nonzero difference {np.min(np.diff(np.unique(T[:, 0, :]))) if T.size else 0} ns):")
for k, v in parts.items():
    print(f"  {k:45s} {np.median(v) / 1e3:7.2f}")

if "--quick" not in sys.argv:
    f = F.fit_fused(X, y, Xt, yt, epochs=3, progress=False)
    print(f"accuracy after 3 epochs: {f['epoch'][-1]['test_acc']:.4f} (plain loop: 0.9567); epochs "
          f"{[round(e['seconds'] * 1e3, 1) for e in f['epoch']]} ms")
