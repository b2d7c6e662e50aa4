"""`python -m course race`: wall time to a fixed test accuracy, the course's fastest loop against PyTorch's.

The 784-128-10 MLP in FP32 (TF32 off) on MNIST. The clock runs from the data on the GPU (and every kernel compiled
or graph recorded, by a warm-up run) to the first evaluation at which the test accuracy reaches the target; each
evaluation (the whole test set, EVALS_PER_EPOCH times an epoch, at the same points for every implementation) is
outside the clock. Each side gets the same sweep (batch size, learning rate, schedule, momentum where it has
one) with one seed; the best recipes then run with SEEDS seeds and the median is the row's time:

  course_fused      course.fused, one cooperative launch per evaluation interval (plain SGD, batch <= 64)
  pytorch_graph     the whole step (gather, forward, loss, backward, SGD or heavy-ball momentum) in one CUDA graph,
                    the learning rate a tensor the graph reads
  pytorch_compile   torch.compile(mode="reduce-overhead") of the model, the same step around it (best recipe only)
  pytorch_eager     torch.nn + torch.optim.SGD at batch 64, for reference (the best batch-64 recipe)

A schedule is "const" or "linear-E": the rate falls linearly to zero over E epochs (then the run ends), changed
once per evaluation interval on both sides.
"""
import math
import platform
import sys
import time
from collections import namedtuple
from datetime import datetime, timezone

import numpy as np

from course.race import recipe_time, time_to_target

TARGET = 0.975          # test accuracy to reach
EVALS_PER_EPOCH = 4     # evaluation points (and learning-rate changes) per epoch
SEEDS = 5               # seeds for the final rows; the sweep uses one
MAX_EPOCHS = 8          # a "const" run that has not reached the target by then does not count
FINALISTS = 2           # recipes per implementation taken from the sweep to the final
HIDDEN = 128

Recipe = namedtuple("Recipe", "impl batch_size lr schedule momentum")


def hidden(quick):
    """The hidden layer: 128, or the bench's pipeline-check size with --quick in the simulator."""
    import course
    from course.tools.bench import config
    return config(quick, course.SIMULATOR)["hidden"]


def sweep_grid(quick=False):
    """The recipes each side's sweep tries: the same schedules; momentum where the implementation has it."""
    schedules = ["const", "linear-2", "linear-3", "linear-4", "linear-6"]
    if quick:
        return [Recipe("course_fused", 16, 0.1, "const", 0.0), Recipe("pytorch_graph", 16, 0.1, "linear-2", 0.9)]
    course = [Recipe("course_fused", b, lr, s, 0.0) for b in (32, 64) for lr in (0.1, 0.2, 0.3, 0.4, 0.6)
              for s in schedules[:4]]
    torch = [Recipe("pytorch_graph", b, round(lr * (1 if mu == 0 else 0.1), 6), s, mu)
             for b in (32, 64, 128, 256, 512, 1024, 2048) for mu in (0.0, 0.9)
             for lr in (0.1, 0.2, 0.4, 0.8) for s in schedules]
    return course + torch


def epochs_of(schedule, quick=False):
    """How many epochs a run of this schedule may take."""
    if schedule.startswith("linear-"):
        return int(schedule.split("-")[1])
    return 1 if quick else MAX_EPOCHS


def rate(recipe, interval, quick=False):
    """The learning rate during evaluation interval `interval` (0, 1, ...): the schedule at the interval's middle."""
    if recipe.schedule == "const":
        return recipe.lr
    total = epochs_of(recipe.schedule, quick) * EVALS_PER_EPOCH
    return recipe.lr * max(0.0, 1.0 - (interval + 0.5) / total)


def intervals(steps):
    """(first step, end step) of each evaluation interval of an epoch of `steps` steps."""
    cuts = [round(k * steps / EVALS_PER_EPOCH) for k in range(EVALS_PER_EPOCH + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


# --- the runners: each yields (training seconds so far, test accuracy) at every evaluation point -------------

def run_course_fused(data, recipe, seed, quick=False):
    """course.fused's epoch kernel, launched once per evaluation interval with that interval's rate."""
    from numba import cuda
    from course.fused import FusedTrainer
    from course.train import evaluate, init_params
    X_d, y_d, Xt_d, yt_d = data
    B, N = recipe.batch_size, X_d.shape[0]
    n, steps = (N // B) * B, N // B
    params = init_params(hidden(quick), seed, n_in=X_d.shape[1])
    trainer = FusedTrainer(params, B, recipe.lr, mode="epoch")
    perm_h, perm_d = cuda.pinned_array(n, np.int64), cuda.device_array(n, np.int64)
    losses = cuda.device_array(steps, np.float32)
    rng, clock, k = np.random.default_rng(seed), 0.0, 0
    for _ in range(epochs_of(recipe.schedule, quick)):
        perm = rng.permutation(N)[:n]                 # drawn outside the clock
        cuda.synchronize()
        t0 = time.perf_counter()
        perm_h[:] = perm
        perm_d.copy_to_device(perm_h, stream=cuda.default_stream())
        for a, b in intervals(steps):
            trainer.lr = np.float32(rate(recipe, k, quick))
            trainer.epoch(X_d, y_d, perm_d[a * B:b * B], losses[a:b])
            cuda.synchronize()
            clock += time.perf_counter() - t0
            yield clock, evaluate(Xt_d, yt_d, params)[1]
            k, t0 = k + 1, time.perf_counter()


def _torch_model(torch, data, seed):
    """The model with course.train.init_params' initial parameters for this seed."""
    from course.tools.bench import _torch_model as model_with
    from course.train import init_params
    n_in = data[0].shape[1]
    init = init_params(HIDDEN, seed, n_in=n_in).to_host()
    return model_with(torch, torch.device("cuda"), init, dict(hidden=HIDDEN), n_in)


def _accuracy(torch, model, Xt_d, yt_d):
    with torch.no_grad():
        return float((model(Xt_d).argmax(1) == yt_d).float().mean())


def _sgd_update(torch, params, bufs, momentum, neg_lr):
    """p += -lr * (g, or the momentum buffer b = mu b + g), the rate read from a device tensor."""
    grads = [p.grad for p in params]
    if momentum:
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, grads)
        grads = bufs
    for p, g in zip(params, grads):
        p.addcmul_(g, neg_lr)


def _torch_epochs(torch, data, recipe, seed, model, perm_d, run_interval, set_rate, quick):
    """The epoch loop every PyTorch runner shares: the permutation into perm_d, the intervals, the evaluations."""
    X_d, _, Xt_d, yt_d = data
    B, N = recipe.batch_size, X_d.shape[0]
    n, steps = (N // B) * B, N // B
    rng, clock, k = np.random.default_rng(seed), 0.0, 0
    for _ in range(epochs_of(recipe.schedule, quick)):
        perm = torch.from_numpy(rng.permutation(N)[:n])   # drawn outside the clock
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm_d.copy_(perm, non_blocking=False)
        for a, b in intervals(steps):
            set_rate(rate(recipe, k, quick))
            run_interval(a, b)
            torch.cuda.synchronize()
            clock += time.perf_counter() - t0
            yield clock, _accuracy(torch, model, Xt_d, yt_d)
            k, t0 = k + 1, time.perf_counter()


def _perm_buffer(torch, data, B):
    return torch.zeros((data[0].shape[0] // B) * B, dtype=torch.long, device="cuda")


def run_pytorch_graph(data, recipe, seed, quick=False):
    """The whole SGD step in one CUDA graph, replayed per step; the batch's rows read at a counter on the GPU."""
    import torch
    X_d, y_d = data[:2]
    model = _torch_model(torch, data, seed)
    params, B = list(model.parameters()), recipe.batch_size
    bufs = [torch.zeros_like(p) for p in params]                         # momentum buffers
    neg_lr = torch.zeros((), device="cuda")                              # -lr, set between replays
    counter = torch.zeros(1, dtype=torch.long, device="cuda")            # the step the next replay takes
    rows = torch.arange(B, device="cuda")
    perm_d = _perm_buffer(torch, data, B)

    def step():
        idx = perm_d[counter * B + rows]                                 # (B,) rows of X, read on the GPU
        loss = torch.nn.functional.cross_entropy(model(X_d[idx]), y_d[idx])
        loss.backward()
        with torch.no_grad():
            _sgd_update(torch, params, bufs, recipe.momentum, neg_lr)
        counter.add_(1)

    start = [p.detach().clone() for p in params]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                                        # warm-up, as torch.cuda.graph asks
        for _ in range(3):
            for p in params:
                p.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    for p in params:
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    with torch.no_grad():                                                # undo the warm-up
        for p, p0 in zip(params, start):
            p.copy_(p0)
        for b in bufs:
            b.zero_()

    def run_interval(a, b):
        counter.fill_(a)
        for _ in range(b - a):
            graph.replay()
    yield from _torch_epochs(torch, data, recipe, seed, model, perm_d, run_interval, lambda lr: neg_lr.fill_(-lr),
                             quick)


def run_pytorch_eager(data, recipe, seed, quick=False):
    """torch.nn and torch.optim.SGD step by step, as most PyTorch code is written."""
    import torch
    X_d, y_d = data[:2]
    model = _torch_model(torch, data, seed)
    opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    B, perm_d = recipe.batch_size, _perm_buffer(torch, data, recipe.batch_size)

    def run_interval(a, b):
        for s in range(a, b):
            idx = perm_d[s * B:(s + 1) * B]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(X_d[idx]), y_d[idx]).backward()
            opt.step()

    def set_rate(lr):
        for g in opt.param_groups:
            g["lr"] = lr
    yield from _torch_epochs(torch, data, recipe, seed, model, perm_d, run_interval, set_rate, quick)


_compiled = {}  # batch size -> (model, its compiled forward): compiled once, the parameters reset per seed


def run_pytorch_compile(data, recipe, seed, quick=False):
    """torch.compile(mode="reduce-overhead") of the model (forward and backward as CUDA graphs), the update eager."""
    import torch
    X_d, y_d = data[:2]
    B = recipe.batch_size
    fresh = list(_torch_model(torch, data, seed).parameters())
    if B not in _compiled:
        model = _torch_model(torch, data, seed)
        _compiled[B] = model, torch.compile(model, mode="reduce-overhead")
    model, fwd = _compiled[B]
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]
    neg_lr = torch.zeros((), device="cuda")
    perm_d = _perm_buffer(torch, data, B)

    def step(idx):
        loss = torch.nn.functional.cross_entropy(fwd(X_d[idx]), y_d[idx])
        loss.backward()
        with torch.no_grad():
            _sgd_update(torch, params, bufs, recipe.momentum, neg_lr)
        for p in params:
            p.grad = None

    for _ in range(3):                                                  # compiled and recorded here, then undone
        step(perm_d[:B])
    with torch.no_grad():
        for p, p0 in zip(params, fresh):
            p.copy_(p0)
        for b in bufs:
            b.zero_()

    def run_interval(a, b):
        for s in range(a, b):
            step(perm_d[s * B:(s + 1) * B])
    yield from _torch_epochs(torch, data, recipe, seed, model, perm_d, run_interval, lambda lr: neg_lr.fill_(-lr),
                             quick)


RUNNERS = {"course_fused": run_course_fused, "pytorch_graph": run_pytorch_graph,
           "pytorch_compile": run_pytorch_compile, "pytorch_eager": run_pytorch_eager}


def run_to_target(data, recipe, seed, target, quick=False):
    """(seconds to target or None, epochs run, best accuracy) of one run; it stops at the target. The clock is
    notebook 14's `time_to_target` (exercise 14.1) over the run's log of (interval seconds, accuracy)."""
    log, clock, best = [], 0.0, 0.0
    for seconds, acc in RUNNERS[recipe.impl](data[recipe.impl.split("_")[0]], recipe, seed, quick):
        log.append((seconds - clock, acc))
        clock, best = seconds, max(best, acc)
        if acc >= target:
            break
    return time_to_target(log, target), len(log) / EVALS_PER_EPOCH, best


def row(recipe, stage, runs):
    """A JSON row: the recipe, the median over seeds (None where any seed missed the target: notebook 14's
    `recipe_time`, exercise 14.2), each seed's time."""
    secs = [r[0] for r in runs]
    med = recipe_time(secs)
    med = None if med is None else float(med)
    return dict(recipe._asdict(), stage=stage, seconds_to_target=med, seeds=secs,
                epochs_to_target=[r[1] if r[0] is not None else None for r in runs],
                best_acc=[round(r[2], 4) for r in runs])


def warm_up(data, impls, quick):
    """Compile every kernel (course) and load the libraries (torch) once, outside every clock."""
    for impl in impls:
        r = Recipe(impl, 16 if quick else 64, 0.1, "linear-1", 0.9 if impl.startswith("pytorch") else 0.0)
        for _ in RUNNERS[impl](data[impl.split("_")[0]], r, 0, quick):
            break


def race(data, quick=False, target=TARGET, seeds=SEEDS, log=print):
    """The sweep (one seed), then the finalists and the references over `seeds` seeds: the result's rows."""
    have = [i for i in RUNNERS if data.get(i.split("_")[0]) is not None]
    warm_up(data, [i for i in have if i != "pytorch_compile"], quick)
    rows = []
    for recipe in [r for r in sweep_grid(quick) if r.impl in have]:
        rows.append(row(recipe, "sweep", [run_to_target(data, recipe, 0, target, quick)]))
        log(line(rows[-1]))
    finals = []
    for impl in ("course_fused", "pytorch_graph"):
        ranked = sorted((r for r in rows if r["impl"] == impl and r["seconds_to_target"] is not None),
                        key=lambda r: r["seconds_to_target"])
        finals += [Recipe(**{k: r[k] for k in Recipe._fields}) for r in ranked[:FINALISTS]]
    best_torch = next((f for f in finals if f.impl == "pytorch_graph"), None)
    b64 = sorted((r for r in rows if r["impl"] == "pytorch_graph" and r["batch_size"] == 64
                  and r["seconds_to_target"] is not None), key=lambda r: r["seconds_to_target"])
    if best_torch is not None and "pytorch_compile" in have:
        finals.append(best_torch._replace(impl="pytorch_compile"))
    if b64 and "pytorch_eager" in have:
        finals.append(Recipe(**{k: b64[0][k] for k in Recipe._fields})._replace(impl="pytorch_eager"))
    for recipe in finals:
        try:
            rows.append(row(recipe, "final", [run_to_target(data, recipe, s, target, quick)
                                              for s in range(seeds)]))
        except Exception as e:  # one implementation failing must not hide the others' figures
            rows.append(dict(recipe._asdict(), stage="final", seconds_to_target=None, seeds=[], failed=True,
                             note=f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
        log(line(rows[-1]))
    return rows


def line(r):
    t = "-" if r.get("seconds_to_target") is None else f"{r['seconds_to_target'] * 1e3:8.1f} ms"
    spread = ""
    done = [s for s in r.get("seeds", []) if s is not None]
    if len(done) > 1:
        spread = f" ({min(done) * 1e3:.1f}-{max(done) * 1e3:.1f})"
    return (f"{r['stage']:5s} {r['impl']:16s} batch {r['batch_size']:4d} lr {r['lr']:<6g} {r['schedule']:9s} "
            f"momentum {r['momentum']:<3g} {t}{spread}" + (f"  {r['note']}" if r.get("note") else ""))


def best(rows, prefix):
    """The final row of the fastest median among implementations starting with prefix."""
    done = [r for r in rows if r["stage"] == "final" and r["impl"].startswith(prefix)
            and r["seconds_to_target"] is not None and r["impl"] != "pytorch_eager"]
    return min(done, key=lambda r: r["seconds_to_target"], default=None)


def load_data(quick):
    """{"course": numba device arrays, "pytorch": host arrays (each runner copies them to its GPU) or None}."""
    import course
    from numba import cuda
    from course.tools.bench import config, load
    cfg = config(quick, course.SIMULATOR)
    X, y, Xt, yt = load(cfg)
    data = {"course": tuple(cuda.to_device(a) for a in (X, y, Xt, yt)), "pytorch": None}
    try:
        import torch
        if torch.cuda.is_available() and not course.SIMULATOR:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            data["pytorch"] = tuple(torch.from_numpy(a).cuda() for a in (X, y.astype(np.int64), Xt,
                                                                          yt.astype(np.int64)))
    except ImportError:
        pass
    return data, cfg


MAX_SEEDS = 100         # --seeds at most: each final row runs every seed to the target
SAVED = "notebooks/results/race-h200.json"  # an H200's race, what notebook 14 reads


def needs_gpu(args):
    """Why this race cannot run here (one line), or None: without a GPU only --quick runs (the full sweep in the
    simulator or on the CPU executor would take hours and time nothing a GPU does)."""
    import course
    if course.SIMULATOR and not args.quick:
        return (f"the race times GPU kernels and needs a GPU (none here: {course.WHY}); {SAVED} holds an H200's "
                "race, and --quick checks the pipeline here")
    return None


def run(args, error):
    import course
    from pathlib import Path
    from course.runtime.device import describe
    from course.tools.cli import write_json
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        error(f"--out {out}: the directory {out.parent} does not exist")
    data, cfg = load_data(args.quick)
    device = describe(course.SIMULATOR)
    X = data["course"][0]
    print(f"race: to {args.target:.1%} test accuracy, {X.shape[0]:,} training images, {X.shape[1]}-{HIDDEN}-10 FP32, "
          f"evaluated {EVALS_PER_EPOCH}x an epoch outside the clock, on {device['name']}"
          + ("" if data["pytorch"] is not None else " (no PyTorch on a GPU here: the course's side only)")
          + (" [--quick: checks the pipeline only]" if args.quick else ""))
    t0 = time.perf_counter()
    rows = race(data, quick=args.quick, target=args.target, seeds=args.seeds)
    ours, theirs = best(rows, "course_"), best(rows, "pytorch_")
    if ours and theirs:
        print(f"fastest: {ours['impl']} {ours['seconds_to_target'] * 1e3:.1f} ms, {theirs['impl']} "
              f"{theirs['seconds_to_target'] * 1e3:.1f} ms: {theirs['seconds_to_target'] / ours['seconds_to_target']:.1f}x")
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    result = dict(gpu=device["name"], device=device, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  quick=bool(args.quick), host=platform.node(), python=platform.python_version(),
                  target=args.target, evals_per_epoch=EVALS_PER_EPOCH, max_epochs=MAX_EPOCHS, seeds=args.seeds,
                  config=dict(n_train=int(X.shape[0]), pixels=int(X.shape[1]), hidden=hidden(args.quick)),
                  rows=rows)
    return 1 if (out is not None and write_json(out, result)) else 0
