"""Check and time scripts/fused_one.py (course.fused with one grid barrier per step) on the GPU: the NumPy twin at
full size in every mode and on smaller grids, ms per epoch, where a step goes (its clocks), with --acc the test
accuracy after 3 epochs against the plain loop. Usage: python scripts/tune_fused_one.py [--acc] [NAME=VALUE ...]"""
import os
import sys
import time

import numpy as np
from numba import cuda

import course  # noqa: F401  (first: it picks the GPU or the simulator)

sys.path.insert(0, os.path.dirname(__file__))
import fused_one as fo  # noqa: E402

for arg in sys.argv[1:]:
    if "=" in arg and not arg.startswith("--"):
        name, value = arg.split("=")
        setattr(fo, name, int(value))
from course.data import load_mnist  # noqa: E402
from course.train import fit, init_params  # noqa: E402

PARTS = [("A: X[batch, tile] staged (step 0 only)", 0, 1), ("A: the partial sums X W1", 1, 2),
         ("A: added into Z (atomics)", 2, 3), ("barrier", 3, 4), ("B: next X issued, Z zeroed", 4, 10), ("B: W2 staged", 10, 11),
         ("B: Z loaded, logit sums", 11, 12), ("B: shuffles, softmax, dZ2", 12, 5),
         ("C: W2, b1, b2 (a unit per block)", 5, 6), ("C: dH[:, tile]", 6, 7), ("C: the sums dW1 = X^T dH", 7, 8),
         ("C: next X stored, W1 updated", 8, 9)]

print("scripts/fused_one.py on", cuda.get_current_device().name, flush=True)
X, y, Xt, yt = load_mnist()
X_d, y_d = cuda.to_device(X), cuda.to_device(y)
B, LR = 64, 0.1
n = (len(X) // B) * B
perm = np.random.default_rng(0).permutation(len(X))[:n]
perm_d = cuda.to_device(perm)
nsteps = n // B
steps = 20
for hidden, blocks, mode in [] if "--quick" in sys.argv else [(128, None, "epoch"), (128, None, "step"), (128, None, "phases"), (128, 32, "epoch"),
                             (70, 9, "epoch")]:
    want_losses, want = fo.sgd_epoch_ref(X, y, perm[:steps * B], init_params(hidden, 0).to_host(), B, LR)
    q = init_params(hidden, 0)
    t = fo.FusedTrainer(q, B, LR, mode=mode, blocks=blocks)
    losses = t.epoch(X_d, y_d, perm_d[:steps * B], cuda.device_array(steps, np.float32)).copy_to_host()
    got = q.to_host()
    err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    lerr = float(np.max(np.abs(losses - want_losses)))
    print(f"check hidden {hidden} blocks {t._blocks} {mode}: loss err {lerr:.2e} param err {err:.2e} "
          f"{'OK' if err < 1e-4 and lerr < 1e-4 else 'WRONG'}", flush=True)
losses = cuda.device_array(nsteps, np.float32)
trainer = fo.FusedTrainer(init_params(128, 0), B, LR, mode="epoch")
times = []
for _ in range(6):
    t0 = time.perf_counter()
    trainer.epoch(X_d, y_d, perm_d, losses)
    cuda.synchronize()
    times.append(time.perf_counter() - t0)
ms = np.median(times[1:]) * 1e3
print(f"epoch {ms:.2f} ms ({ms / nsteps * 1e3:.2f} us/step) blocks {trainer._blocks} threads {trainer.threads}",
      flush=True)
T = trainer.timed_epoch(X_d, y_d, perm_d, losses)[10:-1]
for name, a, b in PARTS:
    if name == "barrier":
        d = T[:, :, b].min(axis=1) - T[:, :, a].max(axis=1)
    else:
        d = (T[:, :128, b] - T[:, :128, a]).max(axis=1)
    mean = np.median((T[:, :128, b] - T[:, :128, a]).mean(axis=1))
    print(f"  {name:42s} {np.median(d) / 1e3:6.2f} us (slowest block, median over steps), mean block {mean / 1e3:6.2f}")
print(f"  step {np.median(np.diff(T[:, 0, 0])) / 1e3:.2f} us", flush=True)
if "--acc" in sys.argv:
    import course.fused as cf
    p = fit(X, y, Xt, yt, hidden=128, epochs=3, batch_size=64, lr=0.1, seed=0, progress=False)
    params = init_params(128, 0)
    tr = fo.FusedTrainer(params, B, LR)
    rng = np.random.default_rng(0)
    for epoch in range(3):
        tr.epoch(X_d, y_d, cuda.to_device(rng.permutation(len(X))[:n]), losses)
    from course.train import evaluate
    _, acc = evaluate(cuda.to_device(Xt), cuda.to_device(yt), params)
    print(f"accuracy after 3 epochs: one-barrier {acc:.4f}, plain {p['epoch'][-1]['test_acc']:.4f}")
