"""One side of scripts/ab_fused: time, clock or profile the fused epoch kernel of the course package on PYTHONPATH.

  python ab_server.py serve NAME DIR BATCH [BATCH ...]   compile and warm course.fused's epoch kernel (plain SGD,
        lr 0.1, 784-128-10, one epoch per batch size), touch DIR/ready-NAME, then for each token DIR/go-NAME-ROUND
        time EPOCHS epochs at each batch size and read the kernel's clocks once (course.epoch.clock_report), print a
        line of each and remove the token; DIR/stop ends it
  python ab_server.py profile NAME DIR BATCH              compile and warm up as serve does, touch DIR/ready-NAME,
        wait for DIR/go-NAME-1, then one more epoch (the one ncu profiles, with --launch-skip 1) and exit
  python ab_server.py summary DIR NAME [NAME ...]         the tables of DIR/NAME.out, each server's output (its
        lines, or ncu's CSV)
scripts/ab_fused starts one server per tree: they compile side by side (the CPU's cores) and are timed in turn (the
GPU). The summary needs no GPU and no numpy."""
import csv
import json
import os
import re
import statistics
import sys
import time

EPOCHS = 10        # timed per token, after the warm-up epoch; the line gives their median and fastest
POLL_S = 0.02      # how often an idle server looks for its token
IN_KERNEL = "ms of the epoch in the kernel: steps x median step"
NCU_SHOWN = ("gpu__time_duration.sum", "smsp__inst_executed.sum", "launch__registers_per_thread",
             "launch__grid_size", "launch__block_size")   # and each warp stall's metric that ncu gave


def trainers(batches):
    """{B: (trainer, X_d, y_d, perm_d, losses)}, each trainer compiled and run one epoch (the warm-up); a batch size
    the tree's FusedTrainer refuses is left out."""
    import numpy as np
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
        try:
            trainer = FusedTrainer(init_params(128, 0), B, 0.1, mode="epoch")
        except ValueError as e:                        # an older kernel's limit (6280691: batch <= 64)
            print(f"batch {B} left out: {e}", file=sys.stderr, flush=True)
            continue
        trainer.epoch(X_d, y_d, perm_d, losses)
        cuda.synchronize()
        runs[B] = (trainer, X_d, y_d, perm_d, losses)
    return runs


def serve(name, folder, batches):
    """Answer each token DIR/go-NAME-ROUND with a line of times and a line of clocks per batch size."""
    from numba import cuda

    from course.epoch import clock_report
    runs = trainers(batches)
    open(os.path.join(folder, f"ready-{name}"), "w").close()
    while not os.path.exists(os.path.join(folder, "stop")):
        tokens = sorted(f for f in os.listdir(folder) if f.startswith(f"go-{name}-"))
        if not tokens:
            time.sleep(POLL_S)
            continue
        round_ = tokens[0].rsplit("-", 1)[1]
        for B, (trainer, X_d, y_d, perm_d, losses) in runs.items():
            ms = []
            for _ in range(EPOCHS):
                t0 = time.perf_counter()
                trainer.epoch(X_d, y_d, perm_d, losses)
                cuda.synchronize()
                ms.append((time.perf_counter() - t0) * 1e3)
            print(f"{name} round {round_} batch {B}: {statistics.median(ms):.2f} ms median, {min(ms):.2f} fastest, "
                  f"last loss {float(losses.copy_to_host()[-1]):.4f}", flush=True)
            T = trainer.timed_epoch(X_d, y_d, perm_d, losses)
            clocks = clock_report(T, trainer.ntiles, B)
            if "step" in clocks:                       # the rest of the epoch's ms: the host's (the launch)
                clocks[IN_KERNEL] = len(T) * clocks["step"] / 1e3
            print(f"{name} round {round_} batch {B} clocks {json.dumps(clocks)}", flush=True)
        os.remove(os.path.join(folder, tokens[0]))


def profile(name, folder, B):
    """The warm-up epoch, then, on the token DIR/go-NAME-1 (so that one tree at a time runs), the one that ncu
    (--launch-skip 1) profiles."""
    from numba import cuda
    trainer, X_d, y_d, perm_d, losses = trainers([B])[B]
    open(os.path.join(folder, f"ready-{name}"), "w").close()
    while not os.path.exists(os.path.join(folder, f"go-{name}-1")):
        time.sleep(POLL_S)
    trainer.epoch(X_d, y_d, perm_d, losses)
    cuda.synchronize()
    print(f"{name}: profiled batch {B}", flush=True)


def read_serve_log(path):
    """({B: [ms median of each round]}, {B: {part: [µs of each round]}}) from a serve log."""
    ms, parts = {}, {}
    for line in open(path):
        m = re.match(r"\S+ round \S+ batch (\d+): ([\d.]+) ms median", line)
        if m:
            ms.setdefault(int(m[1]), []).append(float(m[2]))
        m = re.match(r"\S+ round \S+ batch (\d+) clocks (\{.*\})$", line.strip())
        if m:
            for part, us in json.loads(m[2]).items():
                parts.setdefault(int(m[1]), {}).setdefault(part, []).append(us)
    return ms, parts


def read_ncu_csv(path):
    """{metric: value as printed} of the one kernel in an `ncu --csv --page raw` file (the units row left out)."""
    rows = [r for r in csv.reader(line for line in open(path) if line.startswith('"'))]
    header = next((r for r in rows if "Kernel Name" in r), None)
    if header is None:
        return {}
    data = [r for r in rows if r is not header and len(r) == len(header) and r[0] and r[0][0].isdigit()]
    return dict(zip(header, data[-1])) if data else {}


def summary(folder, names):
    """Print, tree by tree: the median over the rounds of each round's ms per epoch, each clock part's median µs,
    and the ncu metrics, a column per tree."""
    outs = {n: os.path.join(folder, f"{n}.out") for n in names if os.path.exists(os.path.join(folder, f"{n}.out"))}
    logs = {n: read_serve_log(path) for n, path in outs.items()}
    if any(ms for ms, _ in logs.values()):
        print("median over the rounds of each round's median (ms per epoch):")
        for n, (ms, _) in logs.items():
            for B, v in ms.items():
                print(f"  {n:10s} batch {B:5d}: {statistics.median(v):.2f} ms ({len(v)} rounds)")
    shown = [n for n in names if n in logs]
    for B in sorted({B for _, parts in logs.values() for B in parts}):
        print(f"clocks at batch {B}, µs (median over the rounds; course.epoch.clock_report):")
        print(f"  {'part':58s}" + "".join(f"{n[:10]:>11s}" for n in shown))
        every = [p for n in shown for p in logs[n][1].get(B, {})]
        for part in dict.fromkeys(every):
            cells = [logs[n][1].get(B, {}).get(part) for n in shown]
            print(f"  {part[:58]:58s}" + "".join(f"{statistics.median(c):11.2f}" if c else f"{'-':>11s}"
                                                 for c in cells))
    ncu = {n: rows for n, rows in ((n, read_ncu_csv(path)) for n, path in outs.items()) if rows}
    if ncu:
        got = [n for n in names if n in ncu]
        print("ncu (one epoch each; a stall: warps stalled on it per instruction issued, smsp__average_warps_issue_"
              "stalled_REASON_per_issue_active):")
        print(f"  {'metric':40s}" + "".join(f"{n[:12]:>13s}" for n in got))
        for m in dict.fromkeys(k for n in got for k in ncu[n]):
            stall = re.fullmatch(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio", m)
            if m in NCU_SHOWN or stall:
                label = f"stall {stall[1]}" if stall else m
                print(f"  {label:40s}" + "".join(f"{ncu[n].get(m, '-'):>13s}" for n in got))

if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "serve":
        serve(args[0], args[1], [int(b) for b in args[2:]] or [64])
    elif mode == "profile":
        profile(args[0], args[1], int(args[2]))
    elif mode == "summary":
        summary(args[0], args[1:])
    else:
        sys.exit(f"usage: ab_server.py serve NAME DIR BATCH ... | profile NAME DIR BATCH | summary DIR NAME ...; got {mode}")
