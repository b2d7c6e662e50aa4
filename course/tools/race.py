"""`python -m course race`: wall time to a fixed test accuracy, the course's fastest loop against PyTorch's.

The 784-128-10 MLP in FP32 (TF32 off) on MNIST. The clock runs from the data on the GPU (and every kernel compiled
or graph recorded, by a warm-up run) to the first evaluation at which the test accuracy reaches the target; each
evaluation (the whole test set, EVALS_PER_EPOCH times an epoch, at the same points for every implementation) is
outside the clock. Each side's search, with one seed, runs coarse to fine until its best recipe is interior (a
slower rate tried on each side of it, a slower batch on each side where the side supports one): a coarse grid
(COARSE), then rounds that halve and double the rate of the best recipes, try them at the other schedules and at
the neighbouring batch sizes, and finally the rate a factor sqrt(2) either way. The best recipes then run with
SEEDS seeds (the median is the row's time), and the best one's neighbours with SEEDS seeds too, so that its verdict
(`interior` in the JSON, the table at the end) compares medians:

  course_fused      course.fused, one cooperative launch per evaluation interval (SGD, heavy-ball or Nesterov
                    momentum, any batch size: X staged 64 rows at a time)
  pytorch_graph     the whole step (gather, forward, loss, backward, SGD, heavy-ball or Nesterov momentum) in a CUDA
                    graph, the learning rate a tensor the graph reads; per batch size the faster of one graph per
                    step, replayed step by step, and one graph holding all of an interval's steps (measured first:
                    `graph_modes` in the JSON)
  pytorch_compile   torch.compile(mode="reduce-overhead") of the model, the same step around it (best recipe only)
  pytorch_eager     torch.nn + torch.optim.SGD at batch 64, for reference (the best batch-64 recipe)

A schedule is "const", "linear-E" (the rate falls linearly to zero over E epochs, then the run ends) or "onecycle-E"
(it rises linearly from zero over the first WARMUP of the E epochs, then falls linearly to zero at E), changed once
per evaluation interval on both sides, at the interval's middle.
"""
import gc
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
SEEDS = 5               # seeds for the final rows; the search uses one
MAX_EPOCHS = 8          # a "const" run that has not reached the target by then does not count
FINALISTS = 2           # recipes per implementation taken from the search to the final
WARMUP = 0.15           # a one-cycle schedule's rising share
STOP = 3.0              # a search run stops once its clock passes STOP x its side's best time so far: it cannot win
ROUNDS = 8              # refinement rounds at most
TOP = 3                 # recipes a round refines: the fastest, and the fastest at each neighbouring batch size
SEARCH_BUDGET_S = 60    # each side's search stops refining after this many seconds (the verdicts then say so)
HIDDEN = 128

Recipe = namedtuple("Recipe", "impl batch_size lr schedule momentum nesterov", defaults=(False,))

# each side's coarse grid (the same for both: every optimizer each side has), and the batch sizes it supports
COARSE = {
    "course_fused": dict(batch=[32, 64, 128, 256, 512, 1024, 2048, 4096], optimizer=["sgd", "heavy-ball", "nesterov"],
                         lr={"sgd": [0.1, 0.4, 1.6], "heavy-ball": [0.02, 0.08, 0.32], "nesterov": [0.02, 0.08, 0.32]},
                         schedule=["const", "linear-3", "onecycle-3"]),
    "pytorch_graph": dict(batch=[32, 64, 128, 256, 512, 1024, 2048, 4096], optimizer=["sgd", "heavy-ball", "nesterov"],
                          lr={"sgd": [0.1, 0.4, 1.6], "heavy-ball": [0.02, 0.08, 0.32], "nesterov": [0.02, 0.08, 0.32]},
                          schedule=["const", "linear-3", "onecycle-3"]),
}
BATCH_LIMITS = {"course_fused": (8, 16384), "pytorch_graph": (8, 16384)}
SCHEDULES = ["const", "linear-2", "linear-3", "linear-4", "linear-6", "onecycle-2", "onecycle-3", "onecycle-4",
             "onecycle-6"]
OPTIMIZERS = {"sgd": (0.0, False), "heavy-ball": (0.9, False), "nesterov": (0.9, True)}


def optimizer(recipe):
    """The recipe's optimizer by name: sgd, heavy-ball or nesterov."""
    return "sgd" if not recipe.momentum else ("nesterov" if recipe.nesterov else "heavy-ball")


def hidden(quick):
    """The hidden layer: 128, or the bench's pipeline-check size with --quick in the simulator."""
    import course
    from course.tools.bench import config
    return config(quick, course.SIMULATOR)["hidden"]


def coarse_grid(impl, quick=False):
    """The recipes a side's search starts with: COARSE's batch sizes x optimizers x rates x schedules."""
    if quick:
        return {"course_fused": [Recipe(impl, 16, 0.1, "const", 0.0), Recipe(impl, 16, 0.2, "const", 0.0)],
                "pytorch_graph": [Recipe(impl, 16, 0.1, "linear-2", 0.9)]}[impl]
    g = COARSE[impl]
    return [Recipe(impl, b, lr, s, *OPTIMIZERS[o]) for b in sorted(g["batch"], reverse=True) for o in g["optimizer"]
            for lr in g["lr"][o] for s in g["schedule"]]     # the largest batch first: the cheap runs set STOP's bar


def sweep_grid(quick=False):
    """Both sides' coarse grids: the search's first pass."""
    return [r for impl in COARSE for r in coarse_grid(impl, quick)]


def epochs_of(schedule, quick=False):
    """How many epochs a run of this schedule may take."""
    if schedule.startswith(("linear-", "onecycle-")):
        return int(schedule.split("-")[1])
    return 1 if quick else MAX_EPOCHS


def rate(recipe, interval, quick=False):
    """The learning rate during evaluation interval `interval` (0, 1, ...): the schedule at the interval's middle."""
    if recipe.schedule == "const":
        return recipe.lr
    t = (interval + 0.5) / (epochs_of(recipe.schedule, quick) * EVALS_PER_EPOCH)
    if recipe.schedule.startswith("onecycle-") and t < WARMUP:
        return recipe.lr * t / WARMUP
    if recipe.schedule.startswith("onecycle-"):
        return recipe.lr * max(0.0, (1.0 - t) / (1.0 - WARMUP))
    return recipe.lr * max(0.0, 1.0 - t)


def intervals(steps):
    """(first step, end step) of each evaluation interval of an epoch of `steps` steps."""
    cuts = [round(k * steps / EVALS_PER_EPOCH) for k in range(EVALS_PER_EPOCH + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


# --- the search: which recipes neighbour the best, whether it is interior, what to try next ------------------

def _time(r):
    """A row's time to the target, infinite where it missed (or stopped early)."""
    return math.inf if r.get("seconds_to_target") is None else r["seconds_to_target"]


def _recipe(r):
    return Recipe(**{k: r[k] for k in Recipe._fields})


def fastest(rows, impl, **where):
    """The row of `impl` with the shortest time among those matching `where` (field=value), or None."""
    done = [r for r in rows if r["impl"] == impl and r.get("seconds_to_target") is not None
            and all(r[k] == v for k, v in where.items())]
    return min(done, key=_time, default=None)


def neighbours(rows, best):
    """{dimension side: row or None}: the nearest rate tried below and above the best's (same batch, schedule and
    optimizer), and the fastest row at the nearest batch size tried below and above its batch."""
    line = [r for r in rows if r["impl"] == best["impl"] and all(r[k] == best[k] for k in
                                                                  ("batch_size", "schedule", "momentum", "nesterov"))]
    lower = [r for r in line if r["lr"] < best["lr"]]
    upper = [r for r in line if r["lr"] > best["lr"]]
    side = [r for r in rows if r["impl"] == best["impl"]]
    below = [r["batch_size"] for r in side if r["batch_size"] < best["batch_size"]]
    above = [r["batch_size"] for r in side if r["batch_size"] > best["batch_size"]]

    def at_batch(b):
        rs = [r for r in side if r["batch_size"] == b]
        return min(rs, key=_time)
    return {"rate_below": max(lower, key=lambda r: r["lr"], default=None),
            "rate_above": min(upper, key=lambda r: r["lr"], default=None),
            "batch_below": at_batch(max(below)) if below else None,
            "batch_above": at_batch(min(above)) if above else None}


def _describe(r):
    t = (f"{r['seconds_to_target'] * 1e3:.1f} ms" if r.get("seconds_to_target") is not None
         else f"stopped past {STOP:g}x the best" if r.get("stopped") else "missed")
    return f"batch {r['batch_size']} lr {r['lr']:g} {r['schedule']} {optimizer(_recipe(r))}: {t}"


def verdict(rows, best):
    """Whether `best` is interior in rate and in batch size among `rows`: per dimension "interior" (a slower
    neighbour tried on each side), "edge" (a side not tried), "largest supported" (the batch at the side's limit,
    every smaller one slower) or "beaten" (a neighbour was faster); and the neighbours."""
    nb = neighbours(rows, best)
    top = BATCH_LIMITS.get(best["impl"], (0, math.inf))[1]
    out = {}
    for dim in ("rate", "batch"):
        lo, hi = nb[f"{dim}_below"], nb[f"{dim}_above"]
        if any(n is not None and _time(n) < _time(best) for n in (lo, hi)):
            v = "beaten"
        elif dim == "batch" and hi is None and best["batch_size"] >= top and lo is not None:
            v = "largest supported"
        elif lo is None or hi is None:
            v = "edge"
        else:
            v = "interior"
        out[dim] = v
        out[f"{dim}_neighbours"] = [None if n is None else _describe(n) for n in (lo, hi)]
    return out


def _lr(x):
    return float(f"{x:.4g}")


def widen(rows, best, fine=False):
    """The recipes to try next around `best`: its rate halved and doubled (a factor sqrt(2) with fine), it at the
    other schedules, and, where a batch neighbour is missing and the side supports it, it at half or twice the
    batch (rate halved, kept, doubled); only those not in rows."""
    r = _recipe(best)
    lo, hi = BATCH_LIMITS.get(r.impl, (1, math.inf))
    f = math.sqrt(2) if fine else 2.0
    new = [r._replace(lr=_lr(r.lr / f)), r._replace(lr=_lr(r.lr * f))]
    if not fine:
        new += [r._replace(schedule=s) for s in SCHEDULES]
        nb = neighbours(rows, best)
        for key, b in (("batch_below", r.batch_size // 2), ("batch_above", r.batch_size * 2)):
            if nb[key] is None and lo <= b <= hi:
                new += [r._replace(batch_size=b, lr=_lr(r.lr * k)) for k in (0.5, 1.0, 2.0)]
    tried = {_recipe(x) for x in rows}
    return list(dict.fromkeys(x for x in new if x not in tried))


def to_refine(rows, impl):
    """The rows a refinement round works on: the fastest, and the fastest at each neighbouring batch size."""
    best = fastest(rows, impl)
    if best is None:
        return []
    nb = neighbours(rows, best)
    picks = [best] + [nb[k] for k in ("batch_below", "batch_above") if nb[k] is not None and _time(nb[k]) < math.inf]
    return picks[:TOP]


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
    trainer = FusedTrainer(params, B, recipe.lr, mode="epoch", momentum=recipe.momentum, nesterov=recipe.nesterov)
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


_inits = {}  # seed -> the initial parameters on the GPU, as torch tensors in nn.Linear's layout


def _torch_init(torch, data, seed):
    """course.train.init_params' initial parameters for this seed, in the model's parameter order (cached)."""
    if seed not in _inits:
        from course.train import init_params
        init = init_params(HIDDEN, seed, n_in=data[0].shape[1]).to_host()
        _inits[seed] = [torch.from_numpy(a).cuda() for a in (init["W1"].T.copy(), init["b1"], init["W2"].T.copy(),
                                                             init["b2"])]
    return _inits[seed]


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


def _sgd_update(torch, params, grads, bufs, momentum, nesterov, neg_lr):
    """p += -lr * (g; heavy-ball: b = mu b + g; Nesterov: g + mu b), as torch.optim.SGD, the rate a device tensor."""
    if momentum:
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, grads)
        grads = torch._foreach_add(grads, bufs, alpha=momentum) if nesterov else bufs
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


class GraphedStep:
    """The whole SGD step recorded as CUDA graphs for one batch size and optimizer: in "step" mode one graph of one
    step, replayed per step; in "interval" mode one graph per interval length holding that many steps. The batch's
    rows are read at a counter on the GPU, the rate from a tensor; reset() puts a seed's initial parameters back."""

    def __init__(self, torch, data, B, momentum, nesterov, mode):
        X_d, y_d = data[:2]
        self.torch, self.mode = torch, mode
        self.model = _torch_model(torch, data, 0)
        self.params = list(self.model.parameters())
        self.bufs = [torch.zeros_like(p) for p in self.params]                  # momentum buffers
        self.neg_lr = torch.zeros((), device="cuda")                            # -lr, set between replays
        self.counter = torch.zeros(1, dtype=torch.long, device="cuda")          # the step the next replay takes
        self.perm_d = _perm_buffer(torch, data, B)
        self.rows = torch.arange(B, device="cuda")   # an attribute: a graph reads it at every replay, so it must
                                                      # outlive __init__ (freed, its memory went to the next tensor)

        def step():
            idx = self.perm_d[self.counter * B + self.rows]                     # (B,) rows of X, read on the GPU
            loss = torch.nn.functional.cross_entropy(self.model(X_d[idx]), y_d[idx])
            grads = torch.autograd.grad(loss, self.params)
            with torch.no_grad():
                _sgd_update(torch, self.params, grads, self.bufs, momentum, nesterov, self.neg_lr)
            self.counter.add_(1)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                                           # warm-up, as torch.cuda.graph asks
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        steps = data[0].shape[0] // B
        lengths = {1} if mode == "step" else {b - a for a, b in intervals(steps)}
        from numba import cuda                      # here: `python -m course doctor` imports this module, numba or not
        self.graphs = {}
        gc.collect()                                # numba's arrays freed now, not by a collection inside a capture
        for n in sorted(lengths):
            self.graphs[n] = g = torch.cuda.CUDAGraph()
            with cuda.defer_cleanup(), torch.cuda.graph(g):   # a cuMemFree of numba's during it voids the capture
                for _ in range(n):
                    step()

    def reset(self, init):
        """The parameters to `init`, the momentum buffers to zero."""
        with self.torch.no_grad():
            for p, p0 in zip(self.params, init):
                p.copy_(p0)
            for b in self.bufs:
                b.zero_()

    def run_interval(self, a, b):
        """Steps a .. b - 1."""
        self.counter.fill_(a)
        if self.mode == "interval":
            self.graphs[b - a].replay()
        else:
            for _ in range(b - a):
                self.graphs[1].replay()


_graphed = {}      # (batch size, momentum, nesterov) -> GraphedStep, recorded once and reused by every recipe
GRAPH_MODES = {}   # batch size -> {"step": epoch seconds, "interval": epoch seconds, "mode": the faster}


def _epoch_seconds(torch, g, steps):
    """One epoch's wall time through `g` (a warm-up epoch first), the parameters put back after."""
    g.neg_lr.fill_(0.0)
    for _ in range(2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for a, b in intervals(steps):
            g.run_interval(a, b)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
    return t


def graphed(torch, data, B, momentum, nesterov):
    """The GraphedStep for this batch and optimizer, in the faster mode for this batch (timed on first use)."""
    key = (B, momentum, nesterov)
    if key not in _graphed:
        if B not in GRAPH_MODES:
            steps = data[0].shape[0] // B
            both = {m: GraphedStep(torch, data, B, momentum, nesterov, m) for m in ("step", "interval")}
            times = {m: _epoch_seconds(torch, g, steps) for m, g in both.items()}
            GRAPH_MODES[B] = dict(times, mode=min(times, key=times.get))
            _graphed[key] = both[GRAPH_MODES[B]["mode"]]
        else:
            _graphed[key] = GraphedStep(torch, data, B, momentum, nesterov, GRAPH_MODES[B]["mode"])
    return _graphed[key]


def run_pytorch_graph(data, recipe, seed, quick=False):
    """The whole step in CUDA graphs (GraphedStep), recorded once per batch size and optimizer."""
    import torch
    g = graphed(torch, data, recipe.batch_size, recipe.momentum, recipe.nesterov)
    g.reset(_torch_init(torch, data, seed))
    yield from _torch_epochs(torch, data, recipe, seed, g.model, g.perm_d, g.run_interval,
                             lambda lr: g.neg_lr.fill_(-lr), quick)


def run_pytorch_eager(data, recipe, seed, quick=False):
    """torch.nn and torch.optim.SGD step by step, as most PyTorch code is written."""
    import torch
    X_d, y_d = data[:2]
    model = _torch_model(torch, data, seed)
    opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                          nesterov=bool(recipe.nesterov))
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
            _sgd_update(torch, params, [p.grad for p in params], bufs, recipe.momentum, recipe.nesterov, neg_lr)
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


def run_to_target(data, recipe, seed, target, quick=False, limit=None):
    """(seconds to target or None, epochs run, best accuracy, stopped) of one run; it stops at the target, or once
    its clock passes `limit` seconds (stopped). The clock is notebook 14's `time_to_target` (exercise 14.1) over the
    run's log of (interval seconds, accuracy)."""
    log, clock, best, stopped = [], 0.0, 0.0, False
    for seconds, acc in RUNNERS[recipe.impl](data[recipe.impl.split("_")[0]], recipe, seed, quick):
        log.append((seconds - clock, acc))
        clock, best = seconds, max(best, acc)
        if acc >= target:
            break
        if limit is not None and clock > limit:
            stopped = True
            break
    return time_to_target(log, target), len(log) / EVALS_PER_EPOCH, best, stopped


def row(recipe, stage, runs):
    """A JSON row: the recipe, the median over seeds (None where any seed missed the target: notebook 14's
    `recipe_time`, exercise 14.2), each seed's time."""
    secs = [r[0] for r in runs]
    med = recipe_time(secs)
    med = None if med is None else float(med)
    out = dict(recipe._asdict(), optimizer=optimizer(recipe), stage=stage, seconds_to_target=med, seeds=secs,
               epochs_to_target=[r[1] if r[0] is not None else None for r in runs],
               best_acc=[round(r[2], 4) for r in runs])
    stopped = sum(1 for r in runs if len(r) > 3 and r[3])
    if stopped:
        out["stopped"] = stopped    # seeds stopped past STOP x the best time so far: slower than the best
    return out


def failed(recipe, stage, e):
    """The row of a recipe whose run raised `e`: no time, a one-line note."""
    return dict(recipe._asdict(), optimizer=optimizer(recipe), stage=stage, seconds_to_target=None, seeds=[],
                failed=True, note=f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def warm_up(data, impls, quick):
    """Compile every kernel (course) and load the libraries (torch) once, outside every clock."""
    for impl in impls:
        r = Recipe(impl, 16 if quick else 64, 0.1, "linear-1", 0.9 if impl.startswith("pytorch") else 0.0)
        for _ in RUNNERS[impl](data[impl.split("_")[0]], r, 0, quick):
            break


def search(data, impl, target, quick, log, deadline, rounds):
    """One side's search, one seed a recipe: the coarse grid, then refinement rounds (`widen` around `to_refine`'s
    rows; once nothing is left, one round a factor sqrt(2) either side of the best) until no recipe is new, `rounds`
    have run or the clock passes `deadline`. Returns (rows, {rounds, stopped_by_budget})."""
    rows = []

    def trial(recipe):
        b = fastest(rows, impl)
        limit = None if b is None else STOP * b["seconds_to_target"]
        try:
            rows.append(row(recipe, "sweep", [run_to_target(data, recipe, 0, target, quick, limit)]))
        except Exception as e:  # one recipe failing must not end the search
            rows.append(failed(recipe, "sweep", e))
        log(line(rows[-1]))

    for recipe in coarse_grid(impl, quick):
        trial(recipe)
    done, fine, late = 0, False, False
    while done < rounds:
        if time.perf_counter() > deadline:
            late = True
            log(f"search {impl}: out of time after {done} rounds")
            break
        new = list(dict.fromkeys(r for p in to_refine(rows, impl) for r in widen(rows, p)))
        if not new and not fine and fastest(rows, impl) is not None:
            new, fine = widen(rows, fastest(rows, impl), fine=True), True
        if not new:
            break
        for recipe in new:
            trial(recipe)
        done += 1
    return rows, dict(rounds=done, recipes=len(rows), stopped_by_budget=late)


def missing_rates(rows, best):
    """The rates a factor sqrt(2) below and above `best`'s where `rows` tried none on that side (same batch, schedule
    and optimizer): the search can pick a finalist whose own rates it never widened."""
    nb = neighbours(rows, best)
    r = _recipe(best)
    return [r._replace(lr=_lr(r.lr * f)) for key, f in (("rate_below", 2 ** -0.5), ("rate_above", 2 ** 0.5))
            if nb[key] is None]


def settle(data, impl, sweep, target, seeds, quick, log):
    """The FINALISTS fastest recipes of the search with `seeds` seeds, then the best one's neighbours in the search
    (rate below and above, the fastest at the batch below and above) likewise, a rate a factor sqrt(2) away on a
    side the search never tried (missing_rates), until none is new: the rows."""
    rows = []

    def attempt(recipe, stage, limit=None):
        try:
            rows.append(row(recipe, stage, [run_to_target(data, recipe, s, target, quick, limit)
                                            for s in range(seeds)]))
        except Exception as e:  # one recipe failing must not end the race
            rows.append(failed(recipe, stage, e))
        log(line(rows[-1]))

    ranked = sorted((r for r in sweep if r["impl"] == impl and r["seconds_to_target"] is not None), key=_time)
    for r in ranked[:FINALISTS]:
        attempt(_recipe(r), "final")
    for _ in range(4):
        b = fastest(rows, impl)
        if b is None:
            break
        pool = sweep + [r for r in rows if _recipe(r) not in {_recipe(x) for x in sweep}]
        have = {_recipe(r) for r in rows}
        todo = [_recipe(n) for n in neighbours(pool, b).values() if n is not None and _recipe(n) not in have]
        todo += [r for r in missing_rates(pool, b) if r not in have]
        if not todo:
            break
        for recipe in dict.fromkeys(todo):
            attempt(recipe, "neighbour", STOP * b["seconds_to_target"])
    return rows


def race(data, quick=False, target=TARGET, seeds=SEEDS, log=print, rounds=None, budget=SEARCH_BUDGET_S):
    """Each side's search (one seed), then its finalists and the best one's neighbours over `seeds` seeds, and the
    references: (rows, {impl: the search's summary and the best final's verdict})."""
    import course
    if rounds is None:
        rounds = ROUNDS if not quick else (0 if course.SIMULATOR else 1)
    have = [i for i in RUNNERS if data.get(i.split("_")[0]) is not None]
    warm_up(data, [i for i in have if i != "pytorch_compile"], quick)
    rows, summary = [], {}
    for impl in [i for i in ("course_fused", "pytorch_graph") if i in have]:       # `budget` seconds each
        sweep, summary[impl] = search(data, impl, target, quick, log, time.perf_counter() + budget, rounds)
        rows += sweep
    for impl in list(summary):
        final = settle(data, impl, [r for r in rows if r["stage"] == "sweep"], target, seeds, quick, log)
        rows += final
        b = fastest(final, impl)
        if b is not None:
            summary[impl].update(best=_describe(b), **verdict(final, b))
    refs = []
    best_torch = fastest([r for r in rows if r["stage"] != "sweep"], "pytorch_graph")
    b64 = fastest([r for r in rows if r["stage"] == "sweep"], "pytorch_graph", batch_size=64)
    if best_torch is not None and "pytorch_compile" in have:
        refs.append(_recipe(best_torch)._replace(impl="pytorch_compile"))
    if b64 and "pytorch_eager" in have:
        refs.append(_recipe(b64)._replace(impl="pytorch_eager"))
    for recipe in refs:
        try:
            rows.append(row(recipe, "final", [run_to_target(data, recipe, s, target, quick)
                                              for s in range(seeds)]))
        except Exception as e:  # one implementation failing must not hide the others' figures
            rows.append(failed(recipe, "final", e))
        log(line(rows[-1]))
    return rows, summary


def line(r):
    t = "-" if r.get("seconds_to_target") is None else f"{r['seconds_to_target'] * 1e3:8.1f} ms"
    spread = ""
    done = [s for s in r.get("seeds", []) if s is not None]
    if len(done) > 1:
        spread = f" ({min(done) * 1e3:.1f}-{max(done) * 1e3:.1f})"
    note = r.get("note") or (f"stopped past {STOP:g}x the best" if r.get("stopped") else "")
    return (f"{r['stage']:9s} {r['impl']:16s} batch {r['batch_size']:4d} lr {r['lr']:<6g} {r['schedule']:10s} "
            f"{optimizer(_recipe(r)):10s} {t}{spread}" + (f"  {note}" if note else ""))


def table(summary):
    """The race table's lines: each side's best recipe, and whether it is interior in rate and in batch size."""
    out = []
    for impl, s in summary.items():
        if "best" not in s:
            out.append(f"{impl}: no recipe reached the target")
            continue
        out.append(f"{impl}: {s['best']} ({s['recipes']} recipes searched in {s['rounds']} rounds"
                   + (", stopped by the time budget" if s["stopped_by_budget"] else "") + ")")
        for dim in ("rate", "batch"):
            lo, hi = s[f"{dim}_neighbours"]
            out.append(f"  {dim:5s} {s[dim]:17s} below: {lo or 'none tried'}; above: {hi or 'none tried'}")
    return out


def best(rows, prefix):
    """The final (or neighbour) row of the fastest median among implementations starting with prefix."""
    done = [r for r in rows if r["stage"] in ("final", "neighbour") and r["impl"].startswith(prefix)
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
SAVED = "notebooks/results/race-h100.json"  # an H100's race, what notebook 14 reads


def needs_gpu(args):
    """Why this race cannot run here (one line), or None: without a GPU only --quick runs (the full sweep in the
    simulator or on the CPU executor would take hours and time nothing a GPU does)."""
    import course
    if course.SIMULATOR and not args.quick:
        return (f"the race times GPU kernels and needs a GPU (none here: {course.WHY}); {SAVED} holds an H100's "
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
    rows, summary = race(data, quick=args.quick, target=args.target, seeds=args.seeds)
    ours, theirs = best(rows, "course_"), best(rows, "pytorch_")
    print("\n".join([f"race table ({device['name']}): the best recipe of each side, median of {args.seeds} seeds, "
                     "and its neighbours'"] + table(summary)))
    if ours and theirs:
        print(f"fastest: {ours['impl']} {ours['seconds_to_target'] * 1e3:.1f} ms, {theirs['impl']} "
              f"{theirs['seconds_to_target'] * 1e3:.1f} ms: {theirs['seconds_to_target'] / ours['seconds_to_target']:.1f}x")
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    result = dict(gpu=device["name"], device=device, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  quick=bool(args.quick), host=platform.node(), python=platform.python_version(),
                  target=args.target, evals_per_epoch=EVALS_PER_EPOCH, max_epochs=MAX_EPOCHS, seeds=args.seeds,
                  config=dict(n_train=int(X.shape[0]), pixels=int(X.shape[1]), hidden=hidden(args.quick)),
                  grid=dict(coarse={i: COARSE[i] for i in summary}, schedules=SCHEDULES, warmup=WARMUP,
                            batch_limits={i: BATCH_LIMITS[i] for i in summary}, stop=STOP, rounds=ROUNDS,
                            search_budget_s=SEARCH_BUDGET_S),
                  search=summary, graph_modes={str(b): m for b, m in sorted(GRAPH_MODES.items())}, rows=rows)
    return 1 if (out is not None and write_json(out, result)) else 0
