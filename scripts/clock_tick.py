"""How finely course.fused's clocks tick (GPU only): one epoch of the epoch kernel with the clocks on (784-128-10,
batch 64, as notebook 13's cell ck3), then the largest power of two that divides at least 99 % of its %globaltimer
readings, in ns. With `--write`, stored as "globaltimer" in notebooks/results/fused-h200.json (notebook 13 quotes
it where sub-100 ns parts are compared). Usage: python scripts/clock_tick.py [--write]"""
import json
import sys
from pathlib import Path

import numpy as np
from numba import cuda

import course  # noqa: F401  (first: it picks the GPU or the simulator)
from course.data import load_mnist
from course.fused import FusedTrainer
from course.train import init_params

RESULTS = Path(__file__).resolve().parents[1] / "notebooks" / "results" / "fused-h200.json"
SHARE = 0.99        # a tick divides at least this share of the readings
LARGEST = 1024      # ns: the largest tick tried
BATCH, HIDDEN, LR = 64, 128, 0.1


def readings():
    """The nonzero clock readings of one epoch (uint64 ns), after a warm-up epoch."""
    X, y, _, _ = load_mnist()
    X_d, y_d = cuda.to_device(X), cuda.to_device(y)
    n = (len(X) // BATCH) * BATCH
    perm_d = cuda.to_device(np.random.default_rng(2).permutation(len(X))[:n])
    trainer = FusedTrainer(init_params(HIDDEN, 0), BATCH, LR, mode="epoch")
    losses = cuda.device_array(n // BATCH, np.float32)
    trainer.epoch(X_d, y_d, perm_d, losses)                       # warm-up: compilation
    T = trainer.timed_epoch(X_d, y_d, perm_d, losses)
    return T[T > 0]


def tick(values):
    """The largest power of two (ns) dividing at least SHARE of the values, and the share it divides."""
    t = LARGEST
    while t > 1 and np.mean(values % t == 0) < SHARE:
        t //= 2
    return t, float(np.mean(values % t == 0))


def main():
    values = readings()
    t, share = tick(values)
    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    row = {"what": f"scripts/clock_tick.py on an {name}: the largest power of two dividing at least 99 % of one "
                   "epoch's %globaltimer readings",
           "tick_ns": t, "readings": int(values.size), "multiples": int(round(share * values.size))}
    print(json.dumps(row))
    if "--write" in sys.argv:
        data = json.loads(RESULTS.read_text())
        data["globaltimer"] = row
        RESULTS.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
