"""`python -m course bench`: one epoch of the same model through every implementation, in one process.

784-128-10 MLP, SGD lr 0.1, batch 64, the same initial parameters (course.train.init_params, seed 0) and the same
permutation per epoch everywhere. Each implementation trains EPOCHS epochs: the first is the warm-up (compilation,
first touch), epoch_s is the median of the others, test_acc is measured after the last. Rows:

  course_plain         course.train.fit: ~15 launches per step (notebook 06)
  course_plain_graph   the same 15 launches recorded once into a CUDA graph, replayed per step (course.graphs)
  course_fused         course.fused, one cooperative launch per epoch (the fastest loop)
  course_fused_step    course.fused, one cooperative launch per step
  course_fused_step_graph  that launch recorded into a CUDA graph, replayed per step
  course_fused_phases  course.fused, three plain launches per step
  numpy                the float64 NumPy twins (course.grad.mlp_grads_ref) on the CPU: an epoch timed on a subset
                       of the batches and scaled to the full epoch (flagged "scaled")
  pytorch_eager        torch.nn, the same initial parameters copied in, on CUDA when available (skipped with a note
                       when torch cannot be imported)
  pytorch_graph        the same, the whole step (gather, forward, loss, backward, SGD) captured in one CUDA graph
                       (torch.cuda.graph) and replayed per step; the batch's indices read from a step counter on
                       the device; skipped with a note without torch or without a GPU

The graph rows are skipped without a GPU (no CUDA graphs there). Without --quick on a GPU, "matmul" lists the
TFLOP/s of the matmul ladder (notebook 15, the appendix) at 4096^3 (v1 to v5 and cuBLAS through PyTorch when importable).
"""
import functools
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

EPOCHS = 3            # per implementation: 1 warm-up + 2 timed; the accuracy is read after the last
HIDDEN, BATCH, LR, SEED = 128, 64, 0.1, 0
PLAIN_LAUNCHES = 15   # gather 2 + forward 2 + loss 4 (softmax, zero, sum, divide) + backward 6 + update 1
NUMPY_STEPS = 200     # batches timed by the NumPy twin; its epoch time is scaled from them
NUMPY_BUDGET_S = 150  # the NumPy twin trains all epochs for its accuracy only if that takes less than this
MATMUL_N = 4096       # the matmul ladder's size: (N, N) @ (N, N), FP32


def config(quick, simulator):
    """Sizes: the real thing, or a tiny pipeline check (in the simulator: 7x7-pooled images, hidden 8)."""
    if not quick:
        return dict(n_train=None, n_test=None, pool=1, hidden=HIDDEN, batch_size=BATCH, epochs=EPOCHS,
                    numpy_steps=NUMPY_STEPS)
    if simulator:
        return dict(n_train=16, n_test=16, pool=4, hidden=8, batch_size=16, epochs=1, numpy_steps=1)
    return dict(n_train=4096, n_test=1000, pool=1, hidden=HIDDEN, batch_size=BATCH, epochs=2, numpy_steps=8)


def load(cfg):
    from course.data import load_mnist
    from course.train import pool
    X, y, Xt, yt = load_mnist(None)
    if cfg["n_train"]:
        X, y, Xt, yt = X[:cfg["n_train"]], y[:cfg["n_train"]], Xt[:cfg["n_test"]], yt[:cfg["n_test"]]
    if cfg["pool"] > 1:
        X, Xt = pool(X, cfg["pool"]), pool(Xt, cfg["pool"])
    return np.ascontiguousarray(X), y, np.ascontiguousarray(Xt), yt


def permutations(n_train, cfg):
    """The permutations fit() draws: one per epoch from default_rng(SEED), cut to whole batches."""
    rng = np.random.default_rng(SEED)
    n = (n_train // cfg["batch_size"]) * cfg["batch_size"]
    return [rng.permutation(n_train)[:n] for _ in range(cfg["epochs"])]


def _summary(seconds, accs, cfg):
    timed = seconds[1:] or seconds
    return dict(epoch_s=float(np.median(timed)), epoch_s_all=[float(s) for s in seconds],
                test_acc=float(accs[-1]), epochs=cfg["epochs"])


def bench_plain(data, cfg):
    from course.train import fit
    hist = fit(*data, hidden=cfg["hidden"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=LR, seed=SEED,
               progress=False)
    row = _summary([e["seconds"] for e in hist["epoch"]], [e["test_acc"] for e in hist["epoch"]], cfg)
    return dict(row, launches_per_step=PLAIN_LAUNCHES,
                note="course.train.fit (notebook 06); the loss is read back every 50 steps")


def bench_fused(data, cfg, mode):
    from course.fused import LAUNCHES_PER_STEP, fit_fused
    hist = fit_fused(*data, hidden=cfg["hidden"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=LR,
                     seed=SEED, mode=mode, progress=False)
    steps = len(data[0]) // cfg["batch_size"]
    row = _summary([e["seconds"] for e in hist["epoch"]], [e["test_acc"] for e in hist["epoch"]], cfg)
    what = {"epoch": "one cooperative launch per epoch (on a GPU with a TMA, the kernel gathers each next "
                     "batch's tiles of X for it)", "step": "one cooperative launch per step",
            "phases": "three plain launches per step (forward, backward, update)"}[mode]
    return dict(row, launches_per_step=LAUNCHES_PER_STEP[mode] + 1 / steps,
                note=f"course.fused mode={mode!r}: {what}; plus one launch per epoch that zeroes the losses")


def _skipped(note):
    return dict(epoch_s=None, test_acc=None, launches_per_step=None, skipped=True, note=f"skipped: {note}")


def bench_graph(data, cfg, loop):
    """course.graphs.fit_graph: each step one replay of a CUDA graph of the plain loop's or the fused step's
    launches (plus batch_index_kernel and record_loss_kernel)."""
    from course.fused import FusedTrainer
    from course.graphs import fit_graph, graph_support
    why_not = graph_support()
    if why_not:
        return _skipped(why_not)
    trainers = {"plain": None, "fused_step": functools.partial(FusedTrainer, mode="step"),
                "fused_phases": functools.partial(FusedTrainer, mode="phases")}
    fell_back = ""
    try:
        hist = fit_graph(*data, hidden=cfg["hidden"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=LR,
                         seed=SEED, trainer=trainers[loop], progress=False)
    except Exception as e:
        if loop != "fused_step":
            raise
        fell_back = (f"; the cooperative step kernel could not be recorded ({type(e).__name__}: "
                     f"{str(e).splitlines()[0] if str(e) else ''}), so its three-launch form (mode 'phases') was")
        loop = "fused_phases"
        hist = fit_graph(*data, hidden=cfg["hidden"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=LR,
                         seed=SEED, trainer=trainers[loop], progress=False)
    row = _summary([e["seconds"] for e in hist["epoch"]], [e["test_acc"] for e in hist["epoch"]], cfg)
    inside = {"plain": PLAIN_LAUNCHES, "fused_step": 1, "fused_phases": 3}[loop] + 2
    return dict(row, launches_per_step=1, kernels_per_step=inside,
                note=f"course.graphs loop={loop!r}: one graph replay per step ({inside} kernels recorded: the "
                     f"step's and two that read the batch's indices and store the loss on the device){fell_back}")


def _numpy_accuracy(Xt, yt, p):
    H = np.maximum(Xt @ p["W1"] + p["b1"], 0)
    return float(np.mean(np.argmax(H @ p["W2"] + p["b2"], axis=1) == yt))


def bench_numpy(data, cfg, init):
    """The float64 NumPy twins on the CPU: time `numpy_steps` batches, scale to the epoch; train all epochs for the
    accuracy when that fits in NUMPY_BUDGET_S."""
    from course.fused import sgd_epoch_ref
    X, y, Xt, yt = data
    B = cfg["batch_size"]
    perms = permutations(len(X), cfg)
    steps = len(perms[0]) // B
    sub = min(cfg["numpy_steps"], steps)
    sgd_epoch_ref(X, y, perms[0][:B], init, B, LR)                       # warm-up (BLAS threads, caches)
    t0 = time.perf_counter()
    sgd_epoch_ref(X, y, perms[0][:sub * B], init, B, LR)
    epoch_s = (time.perf_counter() - t0) * steps / sub
    row = dict(epoch_s=float(epoch_s), scaled=sub < steps, launches_per_step=0, epochs=cfg["epochs"],
               test_acc=None)
    note = (f"float64 NumPy twins (mlp_loss_ref + mlp_grads_ref) on the CPU; epoch time "
            f"{'scaled from ' + str(sub) + ' of ' + str(steps) + ' batches' if sub < steps else 'measured'}")
    if epoch_s * cfg["epochs"] <= NUMPY_BUDGET_S:
        p = init
        for perm in perms:
            _, p = sgd_epoch_ref(X, y, perm, p, B, LR)
        row["test_acc"] = _numpy_accuracy(Xt, yt, p)
    else:
        note += f"; accuracy not measured (training {cfg['epochs']} epochs would take over {NUMPY_BUDGET_S} s)"
    return dict(row, note=note)


def _torch_model(torch, dev, init, cfg, n_in):
    """nn.Linear-ReLU-nn.Linear with our initial parameters (our W is (in, out); nn.Linear's is (out, in))."""
    torch.backends.cuda.matmul.allow_tf32 = False                        # FP32, as our kernels
    torch.backends.cudnn.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(n_in, cfg["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(cfg["hidden"], 10)).to(dev)
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(init["W1"].T.copy()))
        model[0].bias.copy_(torch.from_numpy(init["b1"]))
        model[2].weight.copy_(torch.from_numpy(init["W2"].T.copy()))
        model[2].bias.copy_(torch.from_numpy(init["b2"]))
    return model


def bench_torch(data, cfg, init):
    try:
        import torch
    except ImportError as e:
        return _skipped(f"torch is not importable here ({e})")
    X, y, Xt, yt = data
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = _torch_model(torch, dev, init, cfg, X.shape[1])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    X_d, y_d = torch.from_numpy(X).to(dev), torch.from_numpy(y).to(dev)
    Xt_d, yt_d = torch.from_numpy(Xt).to(dev), torch.from_numpy(yt).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    B, seconds, accs = cfg["batch_size"], [], []
    for perm in permutations(len(X), cfg):
        sync()
        t0 = time.perf_counter()
        perm_d = torch.from_numpy(perm).to(dev)
        for k in range(0, len(perm), B):
            idx = perm_d[k:k + B]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(X_d[idx]), y_d[idx])
            loss.backward()
            opt.step()
        sync()
        seconds.append(time.perf_counter() - t0)
        with torch.no_grad():
            accs.append(float((model(Xt_d).argmax(1) == yt_d).float().mean()))
    return dict(_summary(seconds, accs, cfg), launches_per_step=None,
                note=f"torch {torch.__version__} eager on {dev.type}, FP32 (TF32 off), nn.Linear + CrossEntropyLoss "
                     "+ optim.SGD; launches per step not counted")


def bench_torch_graph(data, cfg, init):
    """PyTorch with the whole SGD step captured in one CUDA graph (torch.cuda.graph), replayed once per step. The
    step reads its batch's indices from the epoch's order at a step counter on the device, so nothing changes
    between replays; the warm-up (on a side stream, as torch.cuda.graph asks) is undone before the timed epochs."""
    try:
        import torch
    except ImportError as e:
        return _skipped(f"torch is not importable here ({e})")
    if not torch.cuda.is_available():
        return _skipped(f"torch {torch.__version__} sees no CUDA GPU (CUDA graphs need one)")
    X, y, Xt, yt = data
    dev = torch.device("cuda")
    model = _torch_model(torch, dev, init, cfg, X.shape[1])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    X_d, y_d = torch.from_numpy(X).to(dev), torch.from_numpy(y).to(dev).long()
    Xt_d, yt_d = torch.from_numpy(Xt).to(dev), torch.from_numpy(yt).to(dev)
    B, perms = cfg["batch_size"], permutations(len(X), cfg)
    steps = len(perms[0]) // B
    perm_d = torch.zeros(len(perms[0]), dtype=torch.long, device=dev)   # the epoch's order, copied in per epoch
    counter = torch.zeros(1, dtype=torch.long, device=dev)              # the batch the next replay takes
    rows = torch.arange(B, device=dev)
    losses = torch.zeros(steps, device=dev)

    def step():
        idx = perm_d[counter * B + rows]                                 # (B,): read on the device
        loss = loss_fn(model(X_d[idx]), y_d[idx])
        loss.backward()
        opt.step()
        losses.index_copy_(0, counter, loss.detach().reshape(1))
        counter.add_(1)

    start = [p.detach().clone() for p in model.parameters()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                                        # warm-up: 3 eager steps
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        step()
    with torch.no_grad():                                                # undo the warm-up's 3 steps
        for p, p0 in zip(model.parameters(), start):
            p.copy_(p0)
    seconds, accs = [], []
    for perm in perms:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm_d.copy_(torch.from_numpy(perm))
        counter.zero_()
        for _ in range(steps):
            graph.replay()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        with torch.no_grad():
            accs.append(float((model(Xt_d).argmax(1) == yt_d).float().mean()))
    return dict(_summary(seconds, accs, cfg), launches_per_step=1,
                note=f"torch {torch.__version__}, the whole SGD step captured in one CUDA graph (torch.cuda.graph) "
                     "and replayed per step, FP32 (TF32 off); batch indices read on the device")


def bench_matmul(n=MATMUL_N):
    """[{"impl", "n", "tflops"}]: notebook 15's matmul ladder at (n, n) @ (n, n), FP32, by CUDA events (median),
    and cuBLAS through PyTorch (TF32 off) when torch sees a GPU."""
    from numba import cuda
    from course.forward import matmul_v1_kernel, matmul_v2_kernel
    from course.matmul import matmul_v3, matmul_v4, matmul_v5
    from course.runtime.timing import gpu_time
    rng = np.random.default_rng(0)
    A = cuda.to_device(rng.standard_normal((n, n)).astype(np.float32))
    B = cuda.to_device(rng.standard_normal((n, n)).astype(np.float32))
    C = cuda.device_array((n, n), np.float32)
    g16 = ((n + 15) // 16, (n + 15) // 16)
    versions = {"v1": lambda: matmul_v1_kernel[g16, (16, 16)](A, B, C),
                "v2": lambda: matmul_v2_kernel[g16, (16, 16)](A, B, C),
                "v3": lambda: matmul_v3(A, B, out=C), "v4": lambda: matmul_v4(A, B, out=C),
                "v5": lambda: matmul_v5(A, B, out=C)}
    flop = 2 * n ** 3
    out = [dict(impl=name, n=n, tflops=flop / (gpu_time(fn, repeat=5, warmup=1) * 1e-3) / 1e12)
           for name, fn in versions.items()]
    try:
        import torch
        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            At, Bt = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
            At @ Bt
            start, end, times = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
            for _ in range(10):
                start.record()
                At @ Bt
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            out.append(dict(impl=f"cuBLAS (torch {torch.__version__})", n=n,
                            tflops=flop / (float(np.median(times)) * 1e-3) / 1e12))
    except ImportError:
        pass
    return out


def table(rows):
    lines = [f"{'impl':22s} {'epoch':>12s} {'test acc':>9s} {'launches/step':>14s}  note"]
    for r in rows:
        t = "-" if r.get("epoch_s") is None else f"{r['epoch_s'] * 1e3:10.1f}ms" + ("*" if r.get("scaled") else "")
        a = "-" if r.get("test_acc") is None else f"{r['test_acc']:.4f}"
        n = "-" if r.get("launches_per_step") is None else f"{r['launches_per_step']:.3g}"
        lines.append(f"{r['impl']:22s} {t:>12s} {a:>9s} {n:>14s}  {r.get('note', '')}")
    return "\n".join(lines)


def run(args, error):
    import course
    from course.runtime.device import describe
    from course.train import init_params

    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        error(f"--out {out}: the directory {out.parent} does not exist")
    cfg = config(args.quick, course.SIMULATOR)
    data = load(cfg)
    device = describe(course.SIMULATOR)
    init = init_params(cfg["hidden"], SEED, n_in=data[0].shape[1]).to_host()
    print(f"bench: {len(data[0]):,} training / {len(data[2]):,} test images of {data[0].shape[1]} pixels, "
          f"{data[0].shape[1]}-{cfg['hidden']}-10, SGD lr={LR:g}, batch {cfg['batch_size']}, {cfg['epochs']} epochs "
          f"each (the first is a warm-up), on {device['name']}" + (" [--quick: checks the pipeline only]"
                                                                 if args.quick else ""))
    benches = [("course_plain", lambda: bench_plain(data, cfg)),
               ("course_plain_graph", lambda: bench_graph(data, cfg, "plain")),
               ("course_fused", lambda: bench_fused(data, cfg, "epoch")),
               ("course_fused_step", lambda: bench_fused(data, cfg, "step")),
               ("course_fused_step_graph", lambda: bench_graph(data, cfg, "fused_step")),
               ("course_fused_phases", lambda: bench_fused(data, cfg, "phases")),
               ("numpy", lambda: bench_numpy(data, cfg, init)),
               ("pytorch_eager", lambda: bench_torch(data, cfg, init)),
               ("pytorch_graph", lambda: bench_torch_graph(data, cfg, init))]
    rows = []
    for name, fn in benches:
        t0 = time.perf_counter()
        try:
            row = fn()
        except Exception as e:  # one failing implementation must not hide the others' numbers
            row = dict(epoch_s=None, test_acc=None, launches_per_step=None, failed=True,
                       note=f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        rows.append(dict(impl=name, **row))
        print(f"  {name}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(table(rows))
    print("(* scaled from a subset of the epoch's batches)")
    matmul = []
    if not (args.quick or course.SIMULATOR):
        try:
            matmul = bench_matmul()
        except Exception as e:  # the training rows stand on their own
            print(f"matmul ladder failed: {type(e).__name__}: {e}", file=sys.stderr)
        for m in matmul:
            print(f"matmul {m['impl']:24s} {m['n']}^3 FP32 {m['tflops']:7.2f} TFLOP/s")
    result = dict(gpu=device["name"], device=device, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  quick=bool(args.quick), host=platform.node(), python=platform.python_version(),
                  config=dict(cfg, lr=LR, seed=SEED, n_train=len(data[0]), n_test=len(data[2]),
                              pixels=data[0].shape[1]),
                  rows=rows, matmul=matmul)
    from course.tools.cli import write_json  # never loses the results: a file elsewhere, or stdout, if out fails
    unwritten = out is not None and write_json(out, result)
    return 1 if unwritten or any(r.get("failed") for r in rows) else 0
