"""Check and time scripts/fused_bytes.py (the one-barrier experiment) on the GPU: the NumPy twin at full size, ms per
epoch, where a step goes (its clocks), with --acc the test accuracy after 3 epochs. Usage: python
scripts/tune_fused_bytes.py [PREFETCH=0] [LCOPIES=8] [--acc] [--sass]; SMALL=N: batches from the first N rows."""
import os
import sys
import time

import numpy as np
from numba import cuda

import course  # noqa: F401  (first: it picks the GPU or the simulator)

sys.path.insert(0, os.path.dirname(__file__))
import fused_bytes as fb  # noqa: E402

for arg in sys.argv[1:]:
    if "=" in arg:
        name, value = arg.split("=")
        setattr(fb, name, int(value))
fb.L_CELLS = fb.LCOPIES * fb.MAX_BATCH * fb.NC_PAD      # derived: set again after LCOPIES
from course.data import load_mnist  # noqa: E402
from course.train import fit, init_params  # noqa: E402

print("on", cuda.get_current_device().name, flush=True)
X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, LR = 64, 0.1
n = (len(X) // B) * B
perm = np.random.default_rng(0).permutation(len(X))[:n]
if os.environ.get("SMALL"):
    perm = np.random.default_rng(0).integers(0, int(os.environ["SMALL"]), n)
perm_d = cuda.to_device(perm)
nsteps = n // B
steps = 20
for hidden, blocks, mode in [(128, None, "epoch"), (128, None, "step"), (128, 32, "epoch"), (70, 9, "epoch")]:
    want_losses, want = fb.sgd_epoch_ref(X, y, perm[:steps * B], init_params(hidden, 0).to_host(), B, LR)
    q = init_params(hidden, 0)
    t = fb.FusedTrainer(q, B, LR, mode=mode, blocks=blocks)
    losses = t.epoch(X_d, y_d, perm_d[:steps * B], cuda.device_array(steps, np.float32)).copy_to_host()
    got = q.to_host()
    err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    print(f"check hidden {hidden} blocks {t._blocks} {mode}: loss err {np.max(np.abs(losses - want_losses)):.2e} param err {err:.2e}", flush=True)
losses = cuda.device_array(nsteps, np.float32)
trainer = fb.FusedTrainer(init_params(128, 0), B, LR, mode="epoch")
times = []
for _ in range(6):
    t0 = time.perf_counter()
    trainer.epoch(X_d, y_d, perm_d, losses)
    cuda.synchronize()
    times.append(time.perf_counter() - t0)
ms = np.median(times[1:]) * 1e3
print(f"epoch {ms:.2f} ms ({ms/nsteps*1e3:.2f} us/step) blocks {trainer._blocks} threads {trainer.threads}", flush=True)
T = trainer.timed_epoch(X_d, y_d, perm_d, losses)[10:-1]
parts = [("load X issue", 0, 7), ("byte sums", 7, 8), ("shuffles+sZ", 8, 9), ("H", 9, 1), ("logit atomics", 1, 10), ("prefetch issue", 10, 2), ("barrier own", 2, 3), ("softmax", 3, 4), ("b2", 4, 5), ("unit backward", 5, 6)]
for name, a, b in parts:
    d = (T[:, :, b] - T[:, :, a]).max(axis=1)
    print(f"  {name:20s} max-block median {np.median(d)/1e3:.2f} us  mean-block {np.median((T[:, :, b] - T[:, :, a]).mean(axis=1))/1e3:.2f}")
bar = T[:, :, 3].min(axis=1) - T[:, :, 2].max(axis=1)
print(f"  barrier last arrival->first release {np.median(bar)/1e3:.2f} us; step {np.median(np.diff(T[:, 0, 0]))/1e3:.2f} us")
if os.environ.get("OUT") and "--sass" in sys.argv:
    try:
        sass = fb.fused_bytes_kernel.inspect_sass()
        sass = "\n".join(sass.values()) if isinstance(sass, dict) else str(sass)
        open(os.environ["OUT"] + "/sass.txt", "w").write(sass)
        print("sass lines", len(sass.splitlines()))
    except Exception as e:
        print("no sass:", e)
if "--acc" in sys.argv:
    h = fb.fit_fused(X, y, Xt, yt, epochs=3, progress=True)
    p = fit(X, y, Xt, yt, hidden=128, epochs=3, batch_size=64, lr=0.1, seed=0, progress=False)
    print("acc fused", h["epoch"][-1]["test_acc"], "plain", p["epoch"][-1]["test_acc"])
