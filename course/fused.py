"""The fused training loop (notebook 08): a whole SGD step of the 784-H-10 MLP in two phases, run as two launches
per step, as ONE cooperative launch per step, or as ONE cooperative launch per EPOCH with grid-wide barriers.

Phase 1, one block per batch row (grid-stride over rows): gather the row X[perm[base + r]], H = ReLU(x W1 + b1),
logits, stable softmax, the row's loss (atomically added to losses[step] / B), dZ2 = (P - onehot) / B and
dH = (dZ2 W2^T) * [H > 0]. Everything a row needs comes from that row, so the phase needs no grid barrier.
Phase 2, grid-stride over every parameter: its gradient (a sum over the batch) and its SGD update, in place: one
thread owns each parameter, so the update is race-free; W2 changes only here, after every dH has used it.
A grid-wide barrier separates the phases (and the steps)."""
import math

import numpy as np
from numba import cuda, float32, int64

import course
from course.loss import zero_kernel
from course.util import cdiv, require

MAX_HIDDEN = 1024  # hidden units: the shared row of H and its partial sums hold at most this many floats
MAX_BATCH = 1024   # batch rows: the shared copy of the batch's indices
MAX_THREADS = 1024
NC_PAD = 16        # classes, padded: at most 16 outputs
LANES2 = 32        # at most this many lanes split the hidden sum of each logit
LOG_CELLS = 512    # LANES2 * NC_PAD partial logits (a shared array's size must be a plain constant)
REGS = 64          # registers per thread: 1024-thread blocks (and two 512-thread blocks per SM) always fit
THREADS = 512      # threads per block on a GPU

_JIT = {} if course.SIMULATOR else dict(max_registers=REGS)


def sgd_epoch_ref(X, y, perm, params, batch_size, lr):
    """NumPy twin of one epoch of SGD (float64 gradients from course.grad's twins), batches perm[k*B:(k+1)*B].

    params: dict W1, b1, W2, b2 (host arrays, not changed). Returns (losses (steps,) float64, new params dict)."""
    from course.grad import mlp_grads_ref, mlp_loss_ref
    p = {k: np.asarray(v, np.float64).copy() for k, v in params.items()}
    losses = []
    for k0 in range(0, (len(perm) // batch_size) * batch_size, batch_size):
        idx = perm[k0:k0 + batch_size]
        Xb, yb = X[idx], y[idx]                                   # (B, 784), (B,)
        losses.append(mlp_loss_ref(Xb, yb, p["W1"], p["b1"], p["W2"], p["b2"]))
        g = mlp_grads_ref(Xb, yb, p["W1"], p["b1"], p["W2"], p["b2"])
        for name in p:
            p[name] -= lr * g[name]
    return np.array(losses), p


@cuda.jit(device=True)
def row_phase(X, y, perm, base, W1, b1, W2, b2, H, dZ2, dH, losses, step, sPart, sH, sLog, sZ):
    """Phase 1 for the rows r = blockIdx.x, blockIdx.x + gridDim.x, ... of the batch; every thread must call it."""
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    B = H.shape[0]
    K = X.shape[1]
    hidden = H.shape[1]
    C = dZ2.shape[1]
    kl = max(1, nt // hidden)                  # lanes that split the 784-long sums of layer 1
    kl2 = 1                                    # lanes that split the hidden-long sums of layer 2 (a power of 2)
    while kl2 * 2 <= min(LANES2, nt // NC_PAD):
        kl2 *= 2
    for r in range(cuda.blockIdx.x, B, cuda.gridDim.x):
        row = perm[base + r]                   # the gather: read the training row in place, no copy
        for u in range(t, hidden * kl, nt):    # u = lane * hidden + j: a partial sum of H[r, j]
            j = u % hidden
            acc = float32(0.0)
            for k in range(u // hidden, K, kl):
                acc += X[row, k] * W1[k, j]    # x: one address per warp; W1: 32 neighbours (coalesced)
            sPart[u] = acc
        cuda.syncthreads()
        for j in range(t, hidden, nt):         # combine the lanes, bias, ReLU
            h = b1[j]
            for lane in range(kl):
                h += sPart[lane * hidden + j]
            if h < float32(0.0):
                h = float32(0.0)
            sH[j] = h
            H[r, j] = h
        cuda.syncthreads()
        if t < kl2 * NC_PAD:                   # logits: thread t = lane * NC_PAD + c sums a strip of H[r] W2[:, c]
            c = t % NC_PAD
            acc = float32(0.0)
            if c < C:
                for k in range(t // NC_PAD, hidden, kl2):
                    acc += sH[k] * W2[k, c]
            sLog[t] = acc
        cuda.syncthreads()
        half = kl2 // 2
        while half > 0:                        # tree over the lanes: sLog[c] ends up with the whole sum
            if t < half * NC_PAD:
                sLog[t] += sLog[t + half * NC_PAD]
            cuda.syncthreads()
            half //= 2
        if t < C:                              # thread c: softmax (max and sum recomputed per thread: 10 terms)
            m = sLog[0] + b2[0]
            for c in range(1, C):
                m = max(m, sLog[c] + b2[c])
            s = float32(0.0)
            for c in range(C):
                s += math.exp(sLog[c] + b2[c] - m)
            z = sLog[t] + b2[t]
            label = y[row]
            onehot = float32(1.0) if t == label else float32(0.0)
            dz = (math.exp(z - m) / s - onehot) / float32(B)
            sZ[t] = dz
            dZ2[r, t] = dz
            if t == label:                     # one thread per row adds the row's share of the mean loss
                cuda.atomic.add(losses, step, (math.log(s) - (z - m)) / float32(B))
        cuda.syncthreads()
        for j in range(t, hidden, nt):         # dH = (dZ2 W2^T) * [H > 0], with the old W2
            acc = float32(0.0)
            if sH[j] > float32(0.0):
                for c in range(C):
                    acc += sZ[c] * W2[j, c]
            dH[r, j] = acc
        cuda.syncthreads()                     # the shared arrays are reused by the block's next row


@cuda.jit(device=True)
def update_phase(X, perm, base, lr, W1, b1, W2, b2, H, dZ2, dH, sIdx):
    """Phase 2: every parameter's gradient (a sum over the batch) and its SGD step, one thread per parameter."""
    t = cuda.threadIdx.x
    B = H.shape[0]
    K = X.shape[1]
    hidden = H.shape[1]
    C = dZ2.shape[1]
    for r in range(t, B, cuda.blockDim.x):
        sIdx[r] = perm[base + r]               # the batch's row numbers, once per block
    cuda.syncthreads()
    nW1 = K * hidden
    nb1 = nW1 + hidden
    nW2 = nb1 + hidden * C
    total = nW2 + C
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        acc = float32(0.0)
        if e < nW1:                            # dW1[k, j] = sum_r X[idx[r], k] dH[r, j]
            k = e // hidden
            j = e - k * hidden
            for r in range(B):
                acc += X[sIdx[r], k] * dH[r, j]
            W1[k, j] -= lr * acc
        elif e < nb1:                          # db1[j] = sum_r dH[r, j]
            j = e - nW1
            for r in range(B):
                acc += dH[r, j]
            b1[j] -= lr * acc
        elif e < nW2:                          # dW2[k, c] = sum_r H[r, k] dZ2[r, c]
            k = (e - nb1) // C
            c = e - nb1 - k * C
            for r in range(B):
                acc += H[r, k] * dZ2[r, c]
            W2[k, c] -= lr * acc
        else:                                  # db2[c] = sum_r dZ2[r, c]
            c = e - nW2
            for r in range(B):
                acc += dZ2[r, c]
            b2[c] -= lr * acc


@cuda.jit(**_JIT)
def fused_rows_kernel(X, y, perm, step, W1, b1, W2, b2, H, dZ2, dH, losses):
    """Phase 1 of step `step` as its own launch (any grid: blocks stride over the batch rows)."""
    sPart = cuda.shared.array(MAX_THREADS, float32)
    sH = cuda.shared.array(MAX_HIDDEN, float32)
    sLog = cuda.shared.array(LOG_CELLS, float32)
    sZ = cuda.shared.array(NC_PAD, float32)
    row_phase(X, y, perm, step * H.shape[0], W1, b1, W2, b2, H, dZ2, dH, losses, step, sPart, sH, sLog, sZ)


@cuda.jit(**_JIT)
def fused_update_kernel(X, perm, step, lr, W1, b1, W2, b2, H, dZ2, dH):
    """Phase 2 of step `step` as its own launch (any grid: threads stride over the parameters)."""
    sIdx = cuda.shared.array(MAX_BATCH, int64)
    update_phase(X, perm, step * H.shape[0], lr, W1, b1, W2, b2, H, dZ2, dH, sIdx)


@cuda.jit(**_JIT)
def fused_steps_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, H, dZ2, dH, losses):
    """Steps step0 .. step0 + nsteps - 1 in ONE cooperative launch: both phases of each step, grid-wide barriers
    between them. Correct for any grid that is co-resident (a cooperative launch checks that)."""
    sPart = cuda.shared.array(MAX_THREADS, float32)
    sH = cuda.shared.array(MAX_HIDDEN, float32)
    sLog = cuda.shared.array(LOG_CELLS, float32)
    sZ = cuda.shared.array(NC_PAD, float32)
    sIdx = cuda.shared.array(MAX_BATCH, int64)
    g = cuda.cg.this_grid()
    B = H.shape[0]
    for i in range(nsteps):
        step = step0 + i
        row_phase(X, y, perm, step * B, W1, b1, W2, b2, H, dZ2, dH, losses, step, sPart, sH, sLog, sZ)
        g.sync()                               # every row's H, dZ2, dH is written
        update_phase(X, perm, step * B, lr, W1, b1, W2, b2, H, dZ2, dH, sIdx)
        if i + 1 < nsteps:
            g.sync()                           # every parameter is updated before the next step reads it


MODES = ("phases", "step", "epoch")  # 2 launches per step, 1 cooperative launch per step, 1 per epoch
LAUNCHES_PER_STEP = {"phases": 2, "step": 1, "epoch": 0}  # plus one launch per epoch that zeroes the losses


class FusedTrainer:
    """SGD on the MLP with the fused kernels. params: a FlatParams (W1, b1, W2, b2) from course.train.init_params.

    `mode`: "phases" (two plain launches per step), "step" (one cooperative launch per step) or "epoch" (one
    cooperative launch per epoch). `threads` per block (a multiple of 32, at most 1024) and `blocks` (None: as many
    as can be co-resident and have work; always 1 in the simulator, whose grid barrier works with one block only)."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        if not (1 <= hidden <= MAX_HIDDEN and 1 <= C <= NC_PAD and 1 <= batch_size <= MAX_BATCH):
            raise ValueError(f"the fused kernels need hidden <= {MAX_HIDDEN}, at most {NC_PAD} outputs and "
                             f"batch_size <= {MAX_BATCH}; got {hidden}, {C}, {batch_size}")
        threads = threads or course.pick(gpu=THREADS, sim=64)
        if threads % 32 or not 32 <= threads <= MAX_THREADS:
            raise ValueError(f"threads must be a multiple of 32 in [32, {MAX_THREADS}], got {threads}")
        if course.SIMULATOR and mode != "phases" and blocks not in (None, 1):
            raise ValueError("the simulator's grid barrier works with one block only: blocks=1")
        self.params, self.lr, self.mode, self.threads = params, np.float32(lr), mode, threads
        self.W = (W1, b1, W2, b2)
        f32 = np.float32
        self.H = cuda.device_array((batch_size, hidden), f32)
        self.dZ2 = cuda.device_array((batch_size, C), f32)
        self.dH = cuda.device_array((batch_size, hidden), f32)
        self.n_params = K * hidden + hidden + hidden * C + C
        self._blocks = blocks
        self.batch_size = batch_size

    def grid(self, args):
        """Blocks of the cooperative launch: those with work, at most as many as can be co-resident."""
        if self._blocks:
            return self._blocks
        if course.SIMULATOR:
            return 1
        want = max(self.batch_size, cdiv(self.n_params, self.threads))
        argtypes = tuple(fused_steps_kernel.typeof_pyval(a) for a in args)
        kernel = fused_steps_kernel.compile(argtypes)    # compiled once per signature, then looked up
        self._blocks = min(want, kernel.max_cooperative_grid_blocks(self.threads))
        return self._blocks

    def epoch(self, X_d, y_d, perm_d, losses):
        """Train one epoch over the batches perm_d[k*B:(k+1)*B]; losses[k] (a zeroed-here float32 device array of
        len(perm_d) // B) gets step k's mean loss. Returns losses; nothing is read back."""
        B = self.batch_size
        require("X", X_d, np.float32, ndim=2)
        require("y", y_d, (np.int64, np.int32), shape=(X_d.shape[0],))
        require("perm", perm_d, (np.int64, np.int32), ndim=1)
        nsteps = perm_d.shape[0] // B
        require("losses", losses, np.float32, shape=(nsteps,))
        if X_d.shape[1] != self.W[0].shape[0]:
            raise ValueError(f"X has {X_d.shape[1]} columns but W1 expects {self.W[0].shape[0]} inputs")
        zero_kernel[cdiv(nsteps, 256), 256](losses)
        W1, b1, W2, b2 = self.W
        if self.mode == "phases":
            rows_grid = B if self._blocks is None else self._blocks
            upd_grid = cdiv(self.n_params, self.threads) if self._blocks is None else self._blocks
            for step in range(nsteps):
                fused_rows_kernel[rows_grid, self.threads](X_d, y_d, perm_d, step, W1, b1, W2, b2,
                                                           self.H, self.dZ2, self.dH, losses)
                fused_update_kernel[upd_grid, self.threads](X_d, perm_d, step, self.lr, W1, b1, W2, b2,
                                                            self.H, self.dZ2, self.dH)
            return losses
        chunks = [(s, 1) for s in range(nsteps)] if self.mode == "step" else [(0, nsteps)]
        for step0, n in chunks:
            args = (X_d, y_d, perm_d, step0, n, self.lr, W1, b1, W2, b2, self.H, self.dZ2, self.dH, losses)
            fused_steps_kernel[self.grid(args), self.threads](*args)
        return losses


def fit_fused(X_train, y_train, X_test, y_test, hidden=128, epochs=10, batch_size=64, lr=0.1, seed=0,
              mode="epoch", threads=None, blocks=None, progress=True):
    """course.train.fit's SGD recipe (same init, same permutations) through the fused kernels.

    Returns a history dict like fit's: loss of EVERY step (one copy per epoch), per-epoch metrics, params."""
    from course.train import evaluate, init_params
    from course.update import check_loss
    import time

    n = (len(X_train) // batch_size) * batch_size
    if n == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {len(X_train)} training examples")
    if len(y_train) and not (0 <= int(np.min(y_train)) and int(np.max(y_train)) < 10):
        raise ValueError("labels must lie in [0, 10)")
    X_d, y_d = cuda.to_device(X_train), cuda.to_device(y_train)
    Xt_d, yt_d = cuda.to_device(X_test), cuda.to_device(y_test)
    params = init_params(hidden, seed, n_in=X_train.shape[1])
    trainer = FusedTrainer(params, batch_size, lr, mode=mode, threads=threads, blocks=blocks)
    losses = cuda.device_array(n // batch_size, np.float32)
    rng = np.random.default_rng(seed)
    hist = dict(step=[], loss=[], epoch=[], mode=mode)
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        perm_d = cuda.to_device(rng.permutation(len(X_train))[:n])
        trainer.epoch(X_d, y_d, perm_d, losses)
        cuda.synchronize()
        seconds = time.perf_counter() - t0
        epoch_losses = losses.copy_to_host()
        first = len(hist["step"])
        hist["step"].extend(range(first + 1, first + len(epoch_losses) + 1))
        hist["loss"].extend(float(v) for v in epoch_losses)
        check_loss(len(hist["step"]), float(epoch_losses[-1]), lr, first_loss=hist["loss"][0])
        test_loss, test_acc = evaluate(Xt_d, yt_d, params)
        check_loss(len(hist["step"]), test_loss, lr)
        hist["epoch"].append(dict(epoch=epoch, seconds=seconds, test_loss=test_loss, test_acc=test_acc))
        if progress:
            print(f"epoch {epoch:2d}  {seconds * 1e3:8.2f} ms  test loss {test_loss:.4f}  test accuracy {test_acc:.4f}")
    hist["params"] = params
    return hist
