"""One side of scripts/ab_fused: time the fused epoch kernel of the course package on PYTHONPATH, on a GPU.

Usage: python ab_server.py NAME DIR BATCH [BATCH ...]. Compiles and warms course.fused's epoch kernel (plain SGD,
lr 0.1, 784-128-10, one epoch per batch size), touches DIR/ready-NAME, then for each token DIR/go-NAME-ROUND it
times EPOCHS epochs at each batch size, prints one line per batch size and removes the token; DIR/stop ends it.
scripts/ab_fused starts one per tree: they compile side by side (the CPU's cores) and are timed in turn (the GPU)."""
import os
import sys
import time

import numpy as np

EPOCHS = 10        # timed per token, after the warm-up epoch; the line gives their median and fastest
POLL_S = 0.02      # how often an idle server looks for its token


def main(name, folder, batches):
    from numba import cuda

    import course  # noqa: F401  (first: it picks the device)
    from course.data import load_mnist
    from course.fused import FusedTrainer
    from course.train import init_params
    X, y, _, _ = load_mnist()
    X_d, y_d = cuda.to_device(X), cuda.to_device(y)
    runs = {}
    for B in batches:                                  # every compile before the first timing
        n = (len(X) // B) * B
        perm_d = cuda.to_device(np.random.default_rng(0).permutation(len(X))[:n])
        losses = cuda.device_array(n // B, np.float32)
        trainer = FusedTrainer(init_params(128, 0), B, 0.1, mode="epoch")
        trainer.epoch(X_d, y_d, perm_d, losses)
        cuda.synchronize()
        runs[B] = (trainer, perm_d, losses)
    open(os.path.join(folder, f"ready-{name}"), "w").close()
    while not os.path.exists(os.path.join(folder, "stop")):
        tokens = sorted(f for f in os.listdir(folder) if f.startswith(f"go-{name}-"))
        if not tokens:
            time.sleep(POLL_S)
            continue
        for B, (trainer, perm_d, losses) in runs.items():
            ms = []
            for _ in range(EPOCHS):
                t0 = time.perf_counter()
                trainer.epoch(X_d, y_d, perm_d, losses)
                cuda.synchronize()
                ms.append((time.perf_counter() - t0) * 1e3)
            round_ = tokens[0].rsplit("-", 1)[1]
            print(f"{name} round {round_} batch {B}: {np.median(ms):.2f} ms median, {min(ms):.2f} fastest, "
                  f"last loss {float(losses.copy_to_host()[-1]):.4f}", flush=True)
        os.remove(os.path.join(folder, tokens[0]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3:]] or [64])
