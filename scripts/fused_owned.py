"""EXPERIMENT, not adopted (issue 13, item 3): measured SLOWER than course.fused on the H200 (best 51.6 ms per epoch
against course.fused's 29-30 ms; see notebooks/results/fused-h200.json, "tried, not adopted"). Same API as
course.fused (FusedTrainer, fit_fused, sgd_epoch_ref, LAUNCHES_PER_STEP); run by scripts/tune_fused_owned.py and
checked by tests/test_fused_owned.py. Not part of the course: the notebooks do not use it.

The fused training loop: a whole SGD step of the 784-H-10 MLP with the weights kept where they are
used, ONE grid barrier per step; run as two launches per step, as ONE cooperative launch per step, or as ONE
cooperative launch per EPOCH.

Block j OWNS the hidden units J = j0 .. j0 + cols - 1 (cols = cdiv(hidden, blocks)): it keeps W1[:, J], b1[J] and
W2[J, :] in shared memory (for the whole epoch in mode "epoch"), and a private copy of b2 (every block computes
the same db2, so the copies stay equal). A step:
  forward, local: H[:, J] = ReLU(X[batch] W1[:, J] + b1[J]) and the block's share of the logits,
      H[:, J] W2[J, :], added atomically into a global (B, C) buffer;
  the grid barrier: every share is in;
  backward and update, local: every block reads the logits, adds b2, and computes the softmax, dZ2 = (P - onehot)/B
      and db2 (block 0 records the loss); then dH[:, J] = (dZ2 W2[J, :]^T) * [H[:, J] > 0] and the SGD step of
      everything it owns: W2[J, :], b1[J], W1[:, J] (dW1[:, J] = X[batch]^T dH[:, J]).
The logits buffer is TRIPLE-buffered: step i adds into buffer i % 3 and block 0 zeroes buffer (i + 2) % 3 after
the barrier (last read in step i - 1, next written in step i + 2, after another barrier): one barrier per step."""
import math
import time

import numpy as np
from numba import cuda, float32, int32, uint64

import course
from course.grad import mlp_grads_ref, mlp_loss_ref
from course.loss import zero_kernel
from course.train import evaluate, init_params
from course.update import check_loss
from course.util import cdiv, require

COLS_MAX = 8       # hidden units a block owns at most (128 hidden over 128 blocks: 1 each)
W1_CELLS = 3200    # a block's columns of W1 in shared memory: n_in * cols <= 3200 (784 inputs: 4 columns)
H_CELLS = 1024     # a block's columns of H and dH: batch_size * cols <= 1024
MAX_BATCH = 128    # the batch's row numbers and its dZ2 (MAX_BATCH x NC_PAD) in shared memory
NC_PAD = 16        # classes padded: at most 15 outputs
WARP = 32          # lanes that split the K-long sums of the forward pass
MAX_WARPS = 16     # 512 threads at most
PART_STRIDE = WARP + 1   # partial sums of a (warp, column): 33 apart, so the 32 lanes' cells sit in 32 banks
PART_CELLS = MAX_WARPS * COLS_MAX * PART_STRIDE   # the lanes' partial sums (shared arrays need plain constants)
W2_CELLS = COLS_MAX * NC_PAD                      # a block's rows of W2
Z_CELLS = MAX_BATCH * NC_PAD                      # dZ2
UNROLL = 8         # loads a thread issues before it waits for the first (a loop of constant length is unrolled)
NBUF = 3           # logits buffers: step i adds into i % 3
REGS = 128         # registers per thread at most (512 threads: one block per SM)
THREADS = 512      # threads per block on a GPU
BLOCKS = 128       # blocks on a GPU (at most hidden, and as many as are co-resident)

_JIT = {} if course.SIMULATOR else dict(max_registers=REGS)


def sgd_epoch_ref(X, y, perm, params, batch_size, lr):
    """NumPy twin of one epoch of SGD (float64 gradients from course.grad's twins), batches perm[k*B:(k+1)*B].

    params: dict W1, b1, W2, b2 (host arrays, not changed). Returns (losses (steps,) float64, new params dict)."""
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
def owned_columns(hidden):
    """(j0, cols): the hidden units this block owns, j0 .. j0 + cols - 1 (cols 0 for a spare block)."""
    per = (hidden + cuda.gridDim.x - 1) // cuda.gridDim.x
    j0 = cuda.blockIdx.x * per
    return j0, max(0, min(per, hidden - j0))


@cuda.jit(device=True)
def load_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2):
    """Shared copies of what the block owns: sW1[c * K + k] = W1[k, j0 + c] (a column per row of sW1, so neighbouring
    threads read neighbouring k), sb1[c] = b1[j0 + c], sW2[c * NC_PAD + o] = W2[j0 + c, o]."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    K = W1.shape[0]
    C = W2.shape[1]
    for v in range(t, K * cols, nt):         # v = k * cols + c: a warp reads neighbouring cells of rows of W1
        k = v // cols
        c = v - k * cols
        sW1[c * K + k] = W1[k, j0 + c]
    for v in range(t, cols * C, nt):
        c = v // C
        sW2[c * NC_PAD + v - c * C] = W2[j0 + c, v - c * C]
    if t < cols:
        sb1[t] = b1[j0 + t]
    cuda.syncthreads()


@cuda.jit(device=True)
def store_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2):
    """The inverse of load_owned for W1[:, J], b1[J], W2[J, :] (b2: one block writes it, see the kernels)."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    K = W1.shape[0]
    C = W2.shape[1]
    for v in range(t, K * cols, nt):
        k = v // cols
        c = v - k * cols
        W1[k, j0 + c] = sW1[c * K + k]
    for v in range(t, cols * C, nt):
        c = v // C
        W2[j0 + c, v - c * C] = sW2[c * NC_PAD + v - c * C]
    if t < cols:
        b1[j0 + t] = sb1[t]


@cuda.jit(device=True)
def stage_rows(perm, base, B, sRows):
    """sRows[r] = perm[base + r]: the training rows of the batch (the gather, no copy of X)."""
    for r in range(cuda.threadIdx.x, B, cuda.blockDim.x):
        sRows[r] = perm[base + r]
    cuda.syncthreads()


@cuda.jit(device=True)
def lane_sums(X, row, lane, K, sW1, cols, acc):
    """acc[c] = this lane's share of X[row, :] . W1[:, j0 + c]: inputs k = lane, lane + 32, ... (a warp reads 32
    neighbouring inputs at once), UNROLL loads in flight before the first product."""
    x = cuda.local.array(UNROLL, float32)    # registers (the loops over q are unrolled)
    for c in range(COLS_MAX):
        acc[c] = float32(0.0)
    for k0 in range(lane, K, WARP * UNROLL):
        for q in range(UNROLL):              # the loads
            k = k0 + q * WARP
            x[q] = X[row, k] if k < K else float32(0.0)
        for q in range(UNROLL):              # the products, against the block's columns of W1 in shared memory
            k = uint64(min(k0 + q * WARP, K - 1))   # unsigned: no negative-index check
            for c in range(COLS_MAX):
                if c < cols:
                    acc[c] += x[q] * sW1[uint64(c * K) + k]


@cuda.jit(device=True)
def hidden_columns(X, sRows, B, sW1, sb1, cols, sPart, sH):
    """sH[r * cols + c] = ReLU(X[rows[r]] . W1[:, j0 + c] + b1[j0 + c]):   # (B, 784) @ (784, cols) -> (B, cols)
    a warp per row (nt / 32 rows per round), lanes over k, the 32 lanes' partial sums added from shared memory."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    K = X.shape[1]
    warp = t // WARP
    lane = t - warp * WARP
    warps = nt // WARP
    acc = cuda.local.array(COLS_MAX, float32)
    for r0 in range(0, B, warps):
        r = r0 + warp
        if r < B:
            lane_sums(X, sRows[r], lane, K, sW1, cols, acc)
            for c in range(COLS_MAX):
                if c < cols:
                    sPart[(warp * COLS_MAX + c) * PART_STRIDE + lane] = acc[c]
        cuda.syncthreads()
        for u in range(t, warps * cols, nt):     # u = w * cols + c: one row's sum of 32 partials
            w = u // cols
            c = u - w * cols
            if r0 + w < B:
                h = sb1[c]
                for s in range(WARP):
                    h += sPart[(w * COLS_MAX + c) * PART_STRIDE + s]
                sH[(r0 + w) * cols + c] = max(h, float32(0.0))
        cuda.syncthreads()                       # sPart is reused by the next round


@cuda.jit(device=True)
def add_logit_share(sH, sW2, B, cols, logits):
    """logits[r, o] += sum over the block's c of H[r, j0 + c] W2[j0 + c, o]:   # (B, cols) @ (cols, C) -> (B, C)
    one thread per (r, o), one atomic add each (a block that owns nothing adds nothing)."""
    C = logits.shape[1]
    if cols > 0:
        for v in range(cuda.threadIdx.x, B * C, cuda.blockDim.x):
            r = v // C
            o = v - r * C
            z = float32(0.0)
            for c in range(cols):
                z += sH[r * cols + c] * sW2[c * NC_PAD + o]
            cuda.atomic.add(logits, (r, o), z)


@cuda.jit(device=True)
def softmax_grad(logits, sb2, y, sRows, B, sZ, losses, step, record):
    """sZ[r * NC_PAD + o] = dZ2[r, o] = (softmax(logits[r] + b2)[o] - [o == y[r]]) / B, one thread per row r; when
    `record`, the row's loss / B is added to losses[step]."""
    C = logits.shape[1]
    for r in range(cuda.threadIdx.x, B, cuda.blockDim.x):
        label = y[sRows[r]]
        m = logits[r, 0] + sb2[0]
        for o in range(1, C):
            m = max(m, logits[r, o] + sb2[o])
        s = float32(0.0)
        for o in range(C):
            e = math.exp(logits[r, o] + sb2[o] - m)
            sZ[r * NC_PAD + o] = e                # the numerator, for now
            s += e
        for o in range(C):
            onehot = float32(1.0) if o == label else float32(0.0)
            sZ[r * NC_PAD + o] = (sZ[r * NC_PAD + o] / s - onehot) / float32(B)
        if record:
            cuda.atomic.add(losses, step, (math.log(s) - (logits[r, label] + sb2[label] - m)) / float32(B))
    cuda.syncthreads()


@cuda.jit(device=True)
def hidden_grads(sZ, sW2, sH, B, cols, C, sdH):
    """sdH[r * cols + c] = (dZ2[r] . W2[j0 + c]) * [H[r, c] > 0]:   # (B, C) @ (C, cols) -> (B, cols), the old W2."""
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        r = v // cols
        c = v - r * cols
        acc = float32(0.0)
        for o in range(C):
            acc += sZ[r * NC_PAD + o] * sW2[c * NC_PAD + o]
        sdH[v] = acc if sH[v] > float32(0.0) else float32(0.0)
    cuda.syncthreads()


@cuda.jit(device=True)
def update_small(sZ, sH, sdH, B, cols, C, lr, sW2, sb1, sb2):
    """The SGD step of W2[J, :] (dW2 = H[:, J]^T dZ2: (cols, B) @ (B, C)), of b1[J] (column sums of dH) and of the
    block's copy of b2 (column sums of dZ2): one thread per parameter, a sum over the batch each."""
    t = cuda.threadIdx.x
    n2 = cols * C
    for v in range(t, n2 + cols + C, cuda.blockDim.x):
        acc = float32(0.0)
        if v < n2:                               # W2[j0 + c, o]
            c = v // C
            o = v - c * C
            for r in range(B):
                acc += sH[r * cols + c] * sZ[r * NC_PAD + o]
            sW2[c * NC_PAD + o] -= lr * acc
        elif v < n2 + cols:                      # b1[j0 + c]
            c = v - n2
            for r in range(B):
                acc += sdH[r * cols + c]
            sb1[c] -= lr * acc
        else:                                    # b2[o]
            o = v - n2 - cols
            for r in range(B):
                acc += sZ[r * NC_PAD + o]
            sb2[o] -= lr * acc


@cuda.jit(device=True)
def update_W1(X, sRows, B, sdH, cols, lr, sW1):
    """W1[k, j0 + c] -= lr * sum_r X[rows[r], k] dH[r, c]:   # (784, B) @ (B, cols) -> (784, cols)
    one thread per input k (a warp reads 32 neighbouring inputs of a row of X), UNROLL rows in flight."""
    K = X.shape[1]
    x = cuda.local.array(UNROLL, float32)
    acc = cuda.local.array(COLS_MAX, float32)
    for k in range(cuda.threadIdx.x, K, cuda.blockDim.x):
        for c in range(COLS_MAX):
            acc[c] = float32(0.0)
        for r0 in range(0, B, UNROLL):
            for q in range(UNROLL):              # the loads
                x[q] = X[sRows[min(r0 + q, B - 1)], k] if r0 + q < B else float32(0.0)
            for q in range(UNROLL):
                r = uint64(min(r0 + q, B - 1))
                for c in range(COLS_MAX):
                    if c < cols:
                        acc[c] += x[q] * sdH[r * uint64(cols) + uint64(c)]
        for c in range(COLS_MAX):
            if c < cols:
                sW1[c * K + k] -= lr * acc[c]


@cuda.jit(device=True)
def forward_step(X, perm, base, B, sW1, sb1, sW2, cols, sRows, sPart, sH, logits):
    """Before the barrier: the batch's rows, H[:, J] and the block's share of the logits (atomics into `logits`)."""
    stage_rows(perm, base, B, sRows)
    hidden_columns(X, sRows, B, sW1, sb1, cols, sPart, sH)
    add_logit_share(sH, sW2, B, cols, logits)


@cuda.jit(device=True)
def backward_step(X, y, B, lr, logits, sW1, sb1, sW2, sb2, cols, sRows, sH, sdH, sZ, losses, step):
    """After the barrier: softmax and dZ2 from the complete logits, dH[:, J], and the SGD step of what the block
    owns (block 0 records the loss). Ends with a block barrier: the next step overwrites sRows and sH."""
    C = logits.shape[1]
    softmax_grad(logits, sb2, y, sRows, B, sZ, losses, step, cuda.blockIdx.x == 0)
    hidden_grads(sZ, sW2, sH, B, cols, C, sdH)
    update_small(sZ, sH, sdH, B, cols, C, lr, sW2, sb1, sb2)
    update_W1(X, sRows, B, sdH, cols, lr, sW1)
    cuda.syncthreads()


@cuda.jit(device=True)
def zero_logits(logits):
    """logits[:] = 0 by the calling block."""
    B, C = logits.shape
    for v in range(cuda.threadIdx.x, B * C, cuda.blockDim.x):
        logits[v // C, v % C] = float32(0.0)


@cuda.jit(**_JIT)
def fused_steps_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, logits, losses):
    """Steps step0 .. step0 + nsteps - 1 in ONE cooperative launch, one grid barrier per step; the owned weights
    live in shared memory from the first step to the last. logits: (3, B, C), zero at the start and at the end."""
    sW1 = cuda.shared.array(W1_CELLS, float32)           # (cols, K): W1[:, J]
    sb1 = cuda.shared.array(COLS_MAX, float32)           # (cols,): b1[J]
    sW2 = cuda.shared.array(W2_CELLS, float32)  # (cols, NC_PAD): W2[J, :]
    sb2 = cuda.shared.array(NC_PAD, float32)             # (C,): the block's copy of b2
    sRows = cuda.shared.array(MAX_BATCH, int32)          # (B,): the batch's rows
    sPart = cuda.shared.array(PART_CELLS, float32)   # the lanes' partial sums
    sH = cuda.shared.array(H_CELLS, float32)             # (B, cols): H[:, J]
    sdH = cuda.shared.array(H_CELLS, float32)            # (B, cols): dH[:, J]
    sZ = cuda.shared.array(Z_CELLS, float32)  # (B, NC_PAD): dZ2
    grid = cuda.cg.this_grid()
    B = logits.shape[1]
    j0, cols = owned_columns(W1.shape[1])
    if cuda.threadIdx.x < b2.shape[0]:
        sb2[cuda.threadIdx.x] = b2[cuda.threadIdx.x]     # (load_owned's barrier covers it)
    load_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2)
    for i in range(nsteps):
        step = step0 + i
        forward_step(X, perm, step * B, B, sW1, sb1, sW2, cols, sRows, sPart, sH, logits[i % NBUF])
        grid.sync()                              # every block's share of the logits is in
        if cuda.blockIdx.x == 0:
            zero_logits(logits[(i + 2) % NBUF])  # read in step i - 1 (before this barrier), written in i + 2
        backward_step(X, y, B, lr, logits[i % NBUF], sW1, sb1, sW2, sb2, cols, sRows, sH, sdH, sZ, losses, step)
    grid.sync()                                  # every block has read the last step's logits
    if cuda.blockIdx.x == 0:
        zero_logits(logits[(nsteps - 1) % NBUF])
        if cuda.threadIdx.x < b2.shape[0]:
            b2[cuda.threadIdx.x] = sb2[cuda.threadIdx.x]
    store_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2)


@cuda.jit(**_JIT)
def forward_kernel(X, perm, step, W1, b1, W2, H, logits):
    """Mode "phases", launch 1 of step `step`: H[:, J] (kept in global memory for launch 2) and the shares of the
    logits, added into logits[0] (zero before: launch 2's last block zeroes it)."""
    sW1 = cuda.shared.array(W1_CELLS, float32)
    sb1 = cuda.shared.array(COLS_MAX, float32)
    sW2 = cuda.shared.array(W2_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    sPart = cuda.shared.array(PART_CELLS, float32)
    sH = cuda.shared.array(H_CELLS, float32)
    B = H.shape[0]
    j0, cols = owned_columns(W1.shape[1])
    load_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2)
    forward_step(X, perm, step * B, B, sW1, sb1, sW2, cols, sRows, sPart, sH, logits[0])
    cuda.syncthreads()
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        H[v // cols, j0 + v % cols] = sH[v]


@cuda.jit(**_JIT)
def backward_kernel(X, y, perm, step, lr, W1, b1, W2, b2, H, logits, done, losses):
    """Mode "phases", launch 2 of step `step`: the backward pass and update of what each block owns, from H and
    logits[0]. The last block to have read the logits (an atomic count in done[0]) zeroes them and writes b2."""
    sW1 = cuda.shared.array(W1_CELLS, float32)
    sb1 = cuda.shared.array(COLS_MAX, float32)
    sW2 = cuda.shared.array(W2_CELLS, float32)
    sb2 = cuda.shared.array(NC_PAD, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    sH = cuda.shared.array(H_CELLS, float32)
    sdH = cuda.shared.array(H_CELLS, float32)
    sZ = cuda.shared.array(Z_CELLS, float32)
    sLast = cuda.shared.array(1, int32)
    B = H.shape[0]
    j0, cols = owned_columns(W1.shape[1])
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        sH[v] = H[v // cols, j0 + v % cols]
    if cuda.threadIdx.x < b2.shape[0]:
        sb2[cuda.threadIdx.x] = b2[cuda.threadIdx.x]
    load_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2)
    stage_rows(perm, step * B, B, sRows)
    backward_step(X, y, B, lr, logits[0], sW1, sb1, sW2, sb2, cols, sRows, sH, sdH, sZ, losses, step)
    if cuda.threadIdx.x == 0:                    # this block is done with logits[0] (and has read b2)
        cuda.threadfence()
        sLast[0] = cuda.atomic.add(done, 0, 1) == cuda.gridDim.x - 1
    cuda.syncthreads()
    if sLast[0]:
        zero_logits(logits[0])
        if cuda.threadIdx.x < b2.shape[0]:
            b2[cuda.threadIdx.x] = sb2[cuda.threadIdx.x]
        if cuda.threadIdx.x == 0:
            done[0] = 0
    store_owned(W1, b1, W2, j0, cols, sW1, sb1, sW2)


MODES = ("phases", "step", "epoch")  # 2 launches per step, 1 cooperative launch per step, 1 per epoch
LAUNCHES_PER_STEP = {"phases": 2, "step": 1, "epoch": 0}  # plus one launch per epoch that zeroes the losses


class FusedTrainer:
    """SGD on the MLP with the fused kernels. params: a FlatParams (W1, b1, W2, b2) from course.train.init_params.

    `mode`: "phases" (two plain launches per step, split at the barrier), "step" (one cooperative launch per step)
    or "epoch" (one cooperative launch per epoch). `threads` per block (a multiple of 32, at most 512) and `blocks`
    (None: one per hidden unit, at most BLOCKS and as many as can be co-resident; 1 in the simulator, whose grid
    barrier needs one block): each block owns cdiv(hidden, blocks) hidden units."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        threads = threads or course.pick(gpu=THREADS, sim=64)
        if threads % 32 or not 32 <= threads <= MAX_WARPS * WARP:
            raise ValueError(f"threads must be a multiple of 32 in [32, {MAX_WARPS * WARP}], got {threads}")
        if course.SIMULATOR and mode != "phases" and blocks not in (None, 1):
            raise ValueError("the simulator's grid barrier works with one block only: blocks=1")
        if blocks is None:
            blocks = 1 if course.SIMULATOR and mode != "phases" else min(hidden, BLOCKS)
        cols = cdiv(hidden, blocks)
        if not (1 <= C < NC_PAD and 1 <= batch_size <= MAX_BATCH):
            raise ValueError(f"the fused kernels need at most {NC_PAD - 1} outputs and batch_size <= {MAX_BATCH}; "
                             f"got {C} outputs, batch_size {batch_size}")
        if not (cols <= COLS_MAX and K * cols <= W1_CELLS and batch_size * cols <= H_CELLS):
            raise ValueError(f"each of {blocks} blocks would own {cols} hidden units of {hidden}: the fused kernels "
                             f"need at most {COLS_MAX}, n_in * cols <= {W1_CELLS} and batch_size * cols <= "
                             f"{H_CELLS} (shared memory); use more blocks")
        self.params, self.lr, self.mode, self.threads = params, np.float32(lr), mode, threads
        self.W = (W1, b1, W2, b2)
        self.blocks = cdiv(hidden, cols)                 # every block owns at least one hidden unit
        self._blocks = self.blocks
        self.batch_size = batch_size
        f32 = np.float32
        self.logits = cuda.to_device(np.zeros((NBUF, batch_size, C), f32))   # (3, B, C): zero between launches
        self.H = cuda.device_array((batch_size, hidden), f32)                # (B, hidden): mode "phases" only
        self.done = cuda.to_device(np.zeros(1, np.int32))                    # mode "phases": blocks done

    def phase_grids(self):
        """Blocks of the two launches of mode "phases": one per owner."""
        return self.blocks, self.blocks

    def grid(self, args):
        """Blocks of the cooperative launch, checked against how many can be co-resident."""
        if not course.SIMULATOR:
            argtypes = tuple(fused_steps_kernel.typeof_pyval(a) for a in args)
            kernel = fused_steps_kernel.compile(argtypes)    # compiled once per signature, then looked up
            most = kernel.max_cooperative_grid_blocks(self.threads)
            if self.blocks > most:
                raise ValueError(f"{self.blocks} blocks of {self.threads} threads cannot all be resident at once "
                                 f"(at most {most}): pass blocks=")
        return self.blocks

    def launch_phases(self, X_d, y_d, perm_d, step, losses, stream=0, phases=(1, 2)):
        """The plain launches of step `step` (mode "phases"): forward (1) and backward + update (2), or those
        named in `phases`."""
        W1, b1, W2, b2 = self.W
        nb, nt = self.blocks, self.threads
        if 1 in phases:
            forward_kernel[nb, nt, stream](X_d, perm_d, step, W1, b1, W2, self.H, self.logits)
        if 2 in phases:
            backward_kernel[nb, nt, stream](X_d, y_d, perm_d, step, self.lr, W1, b1, W2, b2, self.H, self.logits,
                                            self.done, losses)

    def launch_step(self, X_d, y_d, idx, loss, stream=0):
        """The launches of ONE step on the batch X_d[idx] (idx: (B,) device array of row numbers) on `stream`, the
        batch's mean loss added to loss[0]: one cooperative launch, or two in mode "phases". For a CUDA graph to
        record (notebook 08): it takes the batch from device memory, as a replayed graph must."""
        if self.mode == "phases":
            self.launch_phases(X_d, y_d, idx, 0, loss, stream)
        else:
            args = (X_d, y_d, idx, 0, 1, self.lr, *self.W, self.logits, loss)
            fused_steps_kernel[self.grid(args), self.threads, stream](*args)

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
        if self.mode == "phases":
            for step in range(nsteps):
                self.launch_phases(X_d, y_d, perm_d, step, losses)
            return losses
        chunks = [(s, 1) for s in range(nsteps)] if self.mode == "step" else [(0, nsteps)]
        for step0, n in chunks:
            args = (X_d, y_d, perm_d, step0, n, self.lr, *self.W, self.logits, losses)
            fused_steps_kernel[self.grid(args), self.threads](*args)
        return losses


def fit_fused(X_train, y_train, X_test, y_test, hidden=128, epochs=10, batch_size=64, lr=0.1, seed=0,
              mode="epoch", threads=None, blocks=None, progress=True):
    """course.train.fit's SGD recipe (same init, same permutations) through the fused kernels.

    Returns a history dict like fit's: loss of EVERY step (one copy per epoch), per-epoch metrics, params."""
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
