"""The fused training loop with the work split in 2-D: block (jb, kb) OWNS the tile W1[Kb, Jb] of the first layer
(ks inputs x cols hidden units: 49 x 16 for 784-128 on 8 x 16 = 128 blocks), keeps it in shared memory for the
whole epoch, and stages only ITS inputs of the batch, X[batch, Kb] (64 x 49), once per step: the forward pass and
dW1 both read them from shared memory. Two grid barriers per step (the first layer's sums over k, then the logits'
sums over j) instead of three.

A step i (buffers i % 3 of Z and logits; the buffer (i + 2) % 3 is zeroed after the first barrier: it was last
read before it, and is next written after two more):
  A. Z[:, Jb] += X[batch, Kb] W1[Kb, Jb]                       (atomics; Z: the pre-activations, (B, hidden))
  -- grid barrier --
  B. H[:, Jb] = ReLU(Z[:, Jb] + b1[Jb]) into shared memory; logits[rows of kb] += H[rows, Jb] W2[Jb, :]  (atomics)
  -- grid barrier --
  C. softmax, dZ2 = (P - onehot) / B, dH[:, Jb] = (dZ2 W2[Jb, :]^T) * [H > 0], and the SGD step of W1[Kb, Jb]
     (dW1 = X[batch, Kb]^T dH[:, Jb]), of the block's copies of W2[Jb, :], b1[Jb] and b2. Every block of column
     group jb computes the same dW2[Jb, :], db1[Jb] and db2 from the same numbers: the copies stay equal.

EXPERIMENT (issue 13, item 3): same API as course.fused (FusedTrainer, fit_fused, sgd_epoch_ref,
LAUNCHES_PER_STEP); run by scripts/tune_fused_owned.py --module fused_split, checked by tests/test_fused_owned.py."""
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

COLS = 16          # hidden units per column group on a GPU (128 hidden: 8 groups)
COLS_MAX = 64      # hidden units a block owns at most
X_CELLS = 4096     # a block's inputs of the batch, X[batch, Kb]: batch_size * ks <= 4096
W1_CELLS = 2048    # a block's tile of W1: ks * cols <= 2048
H_CELLS = 1024     # H[:, Jb] and dH[:, Jb]: batch_size * cols <= 1024
MAX_BATCH = 64     # the batch's row numbers and dZ2 (MAX_BATCH x NC_PAD) in shared memory
NC_PAD = 16        # classes padded: at most 15 outputs
W2_CELLS = COLS_MAX * NC_PAD   # a block's copy of W2[Jb, :]
Z_CELLS = MAX_BATCH * NC_PAD   # dZ2
UNROLL = 4         # loads a thread issues before it waits for the first (a loop of constant length is unrolled)
NBUF = 3           # Z and logits buffers: step i uses i % 3
REGS = 64          # registers per thread at most
THREADS = 1024     # threads per block on a GPU (measured: 512 and 1024 about equal, 256 slower)
BLOCKS = 128       # blocks on a GPU
SKIP = 0           # TIMING ONLY (wrong results): bits 1 loss, 2 copies' update, 4 tile update, 8 dH, 16 Z by plain
                   # stores, 32 no X loads, 64 no logits atomics, 128 no softmax

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
def dot(a, ia, da, b, ib, db, n):
    """sum over s < n of a[ia + s * da] * b[ib + s * db]: four sums in flight (a chain of dependent adds waits on
    every load), unsigned indices (numba then skips its negative-index check)."""
    i, di, k, dk = uint64(ia), uint64(da), uint64(ib), uint64(db)
    s0 = float32(0.0)
    s1 = float32(0.0)
    s2 = float32(0.0)
    s3 = float32(0.0)
    for _ in range(n // 4):
        s0 += a[i] * b[k]
        s1 += a[i + di] * b[k + dk]
        s2 += a[i + di + di] * b[k + dk + dk]
        s3 += a[i + di + di + di] * b[k + dk + dk + dk]
        i += di + di + di + di
        k += dk + dk + dk + dk
    for _ in range(n % 4):
        s0 += a[i] * b[k]
        i += di
        k += dk
    return (s0 + s1) + (s2 + s3)


@cuda.jit(device=True)
def strided_sum(a, ia, da, n):
    """sum over s < n of a[ia + s * da], four sums in flight."""
    i, di = uint64(ia), uint64(da)
    s0 = float32(0.0)
    s1 = float32(0.0)
    s2 = float32(0.0)
    s3 = float32(0.0)
    for _ in range(n // 4):
        s0 += a[i]
        s1 += a[i + di]
        s2 += a[i + di + di]
        s3 += a[i + di + di + di]
        i += di + di + di + di
    for _ in range(n % 4):
        s0 += a[i]
        i += di
    return (s0 + s1) + (s2 + s3)


@cuda.jit(device=True)
def tile_of_block(hidden, K):
    """(j0, cols, k0, ks): the block's hidden units j0 .. j0 + cols - 1 and inputs k0 .. k0 + ks - 1 (a 2-D grid:
    blockIdx.x picks the column group, blockIdx.y the input range; the last of each may be shorter)."""
    per_j = (hidden + cuda.gridDim.x - 1) // cuda.gridDim.x
    per_k = (K + cuda.gridDim.y - 1) // cuda.gridDim.y
    j0 = cuda.blockIdx.x * per_j
    k0 = cuda.blockIdx.y * per_k
    return j0, max(0, min(per_j, hidden - j0)), k0, max(0, min(per_k, K - k0))


@cuda.jit(device=True)
def load_tile(W1, j0, cols, k0, ks, sW1):
    """sW1[k * cols + c] = W1[k0 + k, j0 + c]: the block's tile of W1 into shared memory."""
    for v in range(cuda.threadIdx.x, ks * cols, cuda.blockDim.x):
        k = v // cols
        sW1[v] = W1[k0 + k, j0 + v - k * cols]


@cuda.jit(device=True)
def store_tile(W1, j0, cols, k0, ks, sW1):
    """The inverse of load_tile."""
    for v in range(cuda.threadIdx.x, ks * cols, cuda.blockDim.x):
        k = v // cols
        W1[k0 + k, j0 + v - k * cols] = sW1[v]


@cuda.jit(device=True)
def load_copies(b1, W2, j0, cols, sb1, sW2):
    """The block's copies: sb1[c] = b1[j0 + c], sW2[c * NC_PAD + o] = W2[j0 + c, o] (b2: see the kernels)."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    C = W2.shape[1]
    for v in range(t, cols * C, nt):
        c = v // C
        sW2[c * NC_PAD + v - c * C] = W2[j0 + c, v - c * C]
    for c in range(t, cols, nt):
        sb1[c] = b1[j0 + c]


@cuda.jit(device=True)
def store_copies(b1, W2, j0, cols, sb1, sW2):
    """W2[Jb, :] and b1[Jb] from the block's copies (b2: see the kernels)."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    C = W2.shape[1]
    for v in range(t, cols * C, nt):
        c = v // C
        W2[j0 + c, v - c * C] = sW2[c * NC_PAD + v - c * C]
    for c in range(t, cols, nt):
        b1[j0 + c] = sb1[c]


@cuda.jit(device=True)
def stage_inputs(X, perm, base, B, k0, ks, sRows, sX):
    """sRows[r] = perm[base + r]; sX[r * ks + k] = X[rows[r], k0 + k]: the batch's rows (the gather) and the
    block's inputs of them, UNROLL loads in flight per thread before the first store."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    for r in range(t, B, nt):
        sRows[r] = perm[base + r]
    cuda.syncthreads()
    x = cuda.local.array(UNROLL, float32)    # registers (the loops over q are unrolled)
    for v0 in range(t, B * ks, UNROLL * nt):
        for q in range(UNROLL):              # the loads: a warp reads 32 neighbouring inputs
            v = min(v0 + q * nt, B * ks - 1)
            r = v // ks
            x[q] = float32(v) if SKIP & 32 else X[sRows[r], k0 + v - r * ks]
        for q in range(UNROLL):              # the stores
            if v0 + q * nt < B * ks:
                sX[v0 + q * nt] = x[q]
    cuda.syncthreads()


@cuda.jit(device=True)
def add_partial_sums(sX, sW1, B, ks, j0, cols, Z):
    """Z[r, j0 + c] += sum_k X[r, k0 + k] W1[k0 + k, j0 + c]:   # (B, ks) @ (ks, cols) -> (B, cols), atomics
    one thread per (r, c), both factors in shared memory."""
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        r = v // cols
        c = v - r * cols
        acc = dot(sX, r * ks, 1, sW1, c, cols, ks)
        if SKIP & 16:
            Z[r, j0 + c] = acc
        else:
            cuda.atomic.add(Z, (r, j0 + c), acc)


@cuda.jit(device=True)
def hidden_from_sums(Z, sb1, B, j0, cols, sH):
    """sH[r * cols + c] = ReLU(Z[r, j0 + c] + b1[j0 + c]): the block's columns of H, from the complete sums."""
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        r = v // cols
        sH[v] = max(Z[r, j0 + v - r * cols] + sb1[v - r * cols], float32(0.0))
    cuda.syncthreads()


@cuda.jit(device=True)
def add_logit_share(sH, sW2, B, cols, logits):
    """logits[r, o] += H[r, Jb] . W2[Jb, o] for the block's rows r = kb, kb + gridDim.y, ... (atomics):
    # (rows, cols) @ (cols, C) -> (rows, C); the blocks of a column group share its rows out."""
    C = logits.shape[1]
    ny = cuda.gridDim.y
    n_rows = (B - cuda.blockIdx.y + ny - 1) // ny
    for v in range(cuda.threadIdx.x, n_rows * C, cuda.blockDim.x):
        i = v // C
        o = v - i * C
        r = cuda.blockIdx.y + i * ny
        z = dot(sH, r * cols, 1, sW2, o, NC_PAD, cols)
        if SKIP & 64:
            logits[r, o] = z
        else:
            cuda.atomic.add(logits, (r, o), z)


@cuda.jit(device=True)
def softmax_grad(logits, sb2, y, sRows, B, sZ, losses, step, record):
    """sZ[r * NC_PAD + o] = dZ2[r, o] = (softmax(logits[r] + b2)[o] - [o == y[r]]) / B, one thread per row r; when
    `record`, the row's loss / B is added to losses[step]."""
    C = logits.shape[1]
    z = cuda.local.array(NC_PAD, float32)        # registers: the row's logits + b2
    for r in range(cuda.threadIdx.x, B, cuda.blockDim.x):
        for o in range(NC_PAD):                  # every load first: the padding repeats class C - 1 (no branches)
            z[o] = logits[r, min(o, C - 1)] + sb2[min(o, C - 1)]
        label = y[sRows[r]]
        m = z[0]
        zl = z[0]                                # the label's logit (a register: no indexing by a variable)
        for o in range(1, NC_PAD):
            m = max(m, z[o])
            zl = z[o] if o == label else zl
        s = float32(0.0)
        for o in range(NC_PAD):
            z[o] = math.exp(z[o] - m) if o < C else float32(0.0)
            s += z[o]
        for o in range(NC_PAD):
            onehot = float32(1.0) if o == label else float32(0.0)
            if o < C:
                sZ[r * NC_PAD + o] = (z[o] / s - onehot) / float32(B)
        if record:
            cuda.atomic.add(losses, step, (math.log(s) - (zl - m)) / float32(B))
    cuda.syncthreads()


@cuda.jit(device=True)
def hidden_grads(sZ, sW2, sH, B, cols, C, sdH):
    """sdH[r * cols + c] = (dZ2[r] . W2[j0 + c]) * [H[r, c] > 0]:   # (B, C) @ (C, cols) -> (B, cols), the old W2."""
    for v in range(cuda.threadIdx.x, B * cols, cuda.blockDim.x):
        r = v // cols
        c = v - r * cols
        acc = dot(sZ, r * NC_PAD, 1, sW2, c * NC_PAD, 1, C)
        sdH[v] = acc if sH[v] > float32(0.0) else float32(0.0)
    cuda.syncthreads()


@cuda.jit(device=True)
def update_copies(sZ, sH, sdH, B, cols, C, lr, sW2, sb1, sb2):
    """The SGD step of the block's copies of W2[Jb, :] (dW2 = H[:, Jb]^T dZ2: (cols, B) @ (B, C)), b1[Jb] (column
    sums of dH) and b2 (column sums of dZ2): one thread per parameter, a sum over the batch each."""
    n2 = cols * C
    for v in range(cuda.threadIdx.x, n2 + cols + C, cuda.blockDim.x):
        if v < n2:                               # W2[j0 + c, o]
            c = v // C
            o = v - c * C
            sW2[c * NC_PAD + o] -= lr * dot(sH, c, cols, sZ, o, NC_PAD, B)
        elif v < n2 + cols:                      # b1[j0 + c]
            sb1[v - n2] -= lr * strided_sum(sdH, v - n2, cols, B)
        else:                                    # b2[o]
            sb2[v - n2 - cols] -= lr * strided_sum(sZ, v - n2 - cols, NC_PAD, B)


@cuda.jit(device=True)
def update_tile(sX, sdH, B, ks, cols, lr, sW1):
    """W1[k0 + k, j0 + c] -= lr * sum_r X[r, k0 + k] dH[r, c]:   # (ks, B) @ (B, cols) -> (ks, cols)
    one thread per parameter of the tile, both factors in shared memory."""
    for v in range(cuda.threadIdx.x, ks * cols, cuda.blockDim.x):
        k = v // cols
        c = v - k * cols
        sW1[v] -= lr * dot(sX, k, ks, sdH, c, cols, B)


@cuda.jit(device=True)
def backward_update(y, B, lr, logits, sRows, sX, sH, sdH, sZ, sW1, sW2, sb1, sb2, ks, cols, losses, step, record):
    """Phase C: softmax and dZ2 from the complete logits, dH[:, Jb], the SGD step of everything the block owns or
    copies. Ends with a block barrier (the next step overwrites sRows, sX and sH)."""
    C = logits.shape[1]
    if not SKIP & 128:
        softmax_grad(logits, sb2, y, sRows, B, sZ, losses, step, record and not SKIP & 1)
    if not SKIP & 8:
        hidden_grads(sZ, sW2, sH, B, cols, C, sdH)
    if not SKIP & 2:
        update_copies(sZ, sH, sdH, B, cols, C, lr, sW2, sb1, sb2)
    if not SKIP & 4:
        update_tile(sX, sdH, B, ks, cols, lr, sW1)
    cuda.syncthreads()


@cuda.jit(device=True)
def zero_slice(Z, logits, j0, cols):
    """Zero the block's share of a Z buffer (its column group, its rows kb, kb + gridDim.y, ...) and, in block
    (0, 0), the logits buffer."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, C = logits.shape
    ny = cuda.gridDim.y
    n_rows = (B - cuda.blockIdx.y + ny - 1) // ny
    for v in range(t, n_rows * cols, nt):
        i = v // cols
        Z[cuda.blockIdx.y + i * ny, j0 + v - i * cols] = float32(0.0)
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
        for v in range(t, B * C, nt):
            logits[v // C, v % C] = float32(0.0)


@cuda.jit(**_JIT)
def fused_steps_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, Z, logits, losses):
    """Steps step0 .. step0 + nsteps - 1 in ONE cooperative launch on a 2-D grid (column groups x input ranges),
    two grid barriers per step; the tiles of W1 and the copies of W2, b1, b2 stay in shared memory from the first
    step to the last. Z: (3, B, hidden) and logits: (3, B, C), zero at the start and at the end."""
    sX = cuda.shared.array(X_CELLS, float32)             # (B, ks): X[batch, Kb]
    sW1 = cuda.shared.array(W1_CELLS, float32)           # (ks, cols): W1[Kb, Jb]
    sW2 = cuda.shared.array(W2_CELLS, float32)           # (cols, NC_PAD): the copy of W2[Jb, :]
    sb1 = cuda.shared.array(COLS_MAX, float32)           # (cols,): the copy of b1[Jb]
    sb2 = cuda.shared.array(NC_PAD, float32)             # (C,): the copy of b2
    sRows = cuda.shared.array(MAX_BATCH, int32)          # (B,): the batch's rows
    sH = cuda.shared.array(H_CELLS, float32)             # (B, cols): H[:, Jb]
    sdH = cuda.shared.array(H_CELLS, float32)            # (B, cols): dH[:, Jb]
    sZ = cuda.shared.array(Z_CELLS, float32)             # (B, NC_PAD): dZ2
    grid = cuda.cg.this_grid()
    B = logits.shape[1]
    j0, cols, k0, ks = tile_of_block(W1.shape[1], W1.shape[0])
    first = cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0
    load_tile(W1, j0, cols, k0, ks, sW1)
    load_copies(b1, W2, j0, cols, sb1, sW2)
    if cuda.threadIdx.x < b2.shape[0]:
        sb2[cuda.threadIdx.x] = b2[cuda.threadIdx.x]
    for i in range(nsteps):
        step = step0 + i
        stage_inputs(X, perm, step * B, B, k0, ks, sRows, sX)
        add_partial_sums(sX, sW1, B, ks, j0, cols, Z[i % NBUF])
        grid.sync()                              # every partial sum of Z is in
        zero_slice(Z[(i + 2) % NBUF], logits[(i + 2) % NBUF], j0, cols)   # last read before this barrier
        hidden_from_sums(Z[i % NBUF], sb1, B, j0, cols, sH)
        add_logit_share(sH, sW2, B, cols, logits[i % NBUF])
        grid.sync()                              # every share of the logits is in
        backward_update(y, B, lr, logits[i % NBUF], sRows, sX, sH, sdH, sZ, sW1, sW2, sb1, sb2, ks, cols,
                        losses, step, first)
    grid.sync()                                  # every block is done with the last step's buffers
    zero_slice(Z[(nsteps - 1) % NBUF], logits[(nsteps - 1) % NBUF], j0, cols)
    store_tile(W1, j0, cols, k0, ks, sW1)
    if cuda.blockIdx.y == 0:
        store_copies(b1, W2, j0, cols, sb1, sW2)
    if first and cuda.threadIdx.x < b2.shape[0]:
        b2[cuda.threadIdx.x] = sb2[cuda.threadIdx.x]


@cuda.jit(**_JIT)
def partial_sums_kernel(X, perm, step, W1, Z):
    """Mode "phases", launch 1 of step `step` (phase A): Z[0][:, Jb] += X[batch, Kb] W1[Kb, Jb]."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW1 = cuda.shared.array(W1_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    B = Z.shape[1]
    j0, cols, k0, ks = tile_of_block(W1.shape[1], W1.shape[0])
    load_tile(W1, j0, cols, k0, ks, sW1)
    stage_inputs(X, perm, step * B, B, k0, ks, sRows, sX)
    add_partial_sums(sX, sW1, B, ks, j0, cols, Z[0])


@cuda.jit(**_JIT)
def logits_kernel(b1, W2, Z, logits):
    """Mode "phases", launch 2 (phase B): logits[0] += H W2, each block its column group and its rows."""
    sW2 = cuda.shared.array(W2_CELLS, float32)
    sb1 = cuda.shared.array(COLS_MAX, float32)
    sH = cuda.shared.array(H_CELLS, float32)
    B = Z.shape[1]
    j0, cols, k0, ks = tile_of_block(Z.shape[2], 1)
    load_copies(b1, W2, j0, cols, sb1, sW2)
    cuda.syncthreads()
    hidden_from_sums(Z[0], sb1, B, j0, cols, sH)
    add_logit_share(sH, sW2, B, cols, logits[0])


@cuda.jit(**_JIT)
def update_kernel(X, y, perm, step, lr, W1, b1, W2, b2, Z, logits, done, losses):
    """Mode "phases", launch 3 (phase C). The copies are written back by the last block of each column group to
    finish (a count in done[jb]); the last block of all (done[-1]) writes b2 and zeroes Z[0] and logits[0]."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW1 = cuda.shared.array(W1_CELLS, float32)
    sW2 = cuda.shared.array(W2_CELLS, float32)
    sb1 = cuda.shared.array(COLS_MAX, float32)
    sb2 = cuda.shared.array(NC_PAD, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    sH = cuda.shared.array(H_CELLS, float32)
    sdH = cuda.shared.array(H_CELLS, float32)
    sZ = cuda.shared.array(Z_CELLS, float32)
    sLast = cuda.shared.array(2, int32)
    B = Z.shape[1]
    j0, cols, k0, ks = tile_of_block(W1.shape[1], W1.shape[0])
    first = cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0
    load_tile(W1, j0, cols, k0, ks, sW1)
    load_copies(b1, W2, j0, cols, sb1, sW2)
    if cuda.threadIdx.x < b2.shape[0]:
        sb2[cuda.threadIdx.x] = b2[cuda.threadIdx.x]
    stage_inputs(X, perm, step * B, B, k0, ks, sRows, sX)   # (its barriers cover the copies)
    hidden_from_sums(Z[0], sb1, B, j0, cols, sH)
    backward_update(y, B, lr, logits[0], sRows, sX, sH, sdH, sZ, sW1, sW2, sb1, sb2, ks, cols, losses, step, first)
    store_tile(W1, j0, cols, k0, ks, sW1)
    if cuda.threadIdx.x == 0:                    # this block has read everything it reads
        cuda.threadfence()
        sLast[0] = cuda.atomic.add(done, cuda.blockIdx.x, 1) == cuda.gridDim.y - 1
        sLast[1] = cuda.atomic.add(done, done.shape[0] - 1, 1) == cuda.gridDim.x * cuda.gridDim.y - 1
    cuda.syncthreads()
    if sLast[0]:
        store_copies(b1, W2, j0, cols, sb1, sW2)
        if cuda.threadIdx.x == 0:
            done[cuda.blockIdx.x] = 0
    if sLast[1]:
        nb = Z.shape[1] * Z.shape[2]
        for v in range(cuda.threadIdx.x, nb, cuda.blockDim.x):
            Z[0, v // Z.shape[2], v % Z.shape[2]] = float32(0.0)
        C = logits.shape[2]
        for v in range(cuda.threadIdx.x, B * C, cuda.blockDim.x):
            logits[0, v // C, v % C] = float32(0.0)
        if cuda.threadIdx.x < b2.shape[0]:
            b2[cuda.threadIdx.x] = sb2[cuda.threadIdx.x]
        if cuda.threadIdx.x == 0:
            done[done.shape[0] - 1] = 0


PHASE_NAMES = ("A: partial sums of Z", "B: H and the logits", "C: backward + update")
MODES = ("phases", "step", "epoch")  # 3 launches per step, 1 cooperative launch per step, 1 per epoch
LAUNCHES_PER_STEP = {"phases": 3, "step": 1, "epoch": 0}  # plus one launch per epoch that zeroes the losses


class FusedTrainer:
    """SGD on the MLP with the fused kernels. params: a FlatParams (W1, b1, W2, b2) from course.train.init_params.

    `mode`: "phases" (three plain launches per step, split at the barriers), "step" (one cooperative launch per
    step) or "epoch" (one cooperative launch per epoch). `threads` per block (a multiple of 32, at most 1024) and
    `blocks` (None: BLOCKS on a GPU, 1 in the simulator, whose grid barrier needs one block): cdiv(hidden, COLS)
    column groups (fewer if there are fewer blocks) times as many input ranges as the blocks allow."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        threads = threads or course.pick(gpu=THREADS, sim=64)
        if threads % 32 or not 32 <= threads <= 1024:
            raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {threads}")
        if course.SIMULATOR and mode != "phases" and blocks not in (None, 1):
            raise ValueError("the simulator's grid barrier works with one block only: blocks=1")
        if blocks is None:
            blocks = 1 if course.SIMULATOR and mode != "phases" else BLOCKS
        nj = max(1, min(blocks, cdiv(hidden, COLS)))
        cols = cdiv(hidden, nj)
        nj = cdiv(hidden, cols)                          # every group owns at least one hidden unit
        ks = cdiv(K, max(1, blocks // nj))
        nk = cdiv(K, ks)
        if not (1 <= C < NC_PAD and 1 <= batch_size <= MAX_BATCH):
            raise ValueError(f"the fused kernels need at most {NC_PAD - 1} outputs and batch_size <= {MAX_BATCH}; "
                             f"got {C} outputs, batch_size {batch_size}")
        if not (cols <= COLS_MAX and ks * cols <= W1_CELLS and batch_size * ks <= X_CELLS
                and batch_size * cols <= H_CELLS):
            raise ValueError(f"{nj} x {nk} blocks would own tiles of {ks} inputs x {cols} hidden units: the fused "
                             f"kernels need cols <= {COLS_MAX}, ks * cols <= {W1_CELLS}, batch_size * ks <= "
                             f"{X_CELLS} and batch_size * cols <= {H_CELLS} (shared memory); use more blocks")
        self.params, self.lr, self.mode, self.threads = params, np.float32(lr), mode, threads
        self.W = (W1, b1, W2, b2)
        self.blocks = (nj, nk)
        self._blocks = nj * nk
        self.batch_size = batch_size
        f32 = np.float32
        self.Z = cuda.to_device(np.zeros((NBUF, batch_size, hidden), f32))     # (3, B, hidden): zero between
        self.logits = cuda.to_device(np.zeros((NBUF, batch_size, C), f32))     # (3, B, C): launches
        self.done = cuda.to_device(np.zeros(nj + 1, np.int32))                 # mode "phases": blocks done

    def phase_grids(self):
        """Blocks of the three launches of mode "phases"."""
        return self.blocks, self.blocks, self.blocks

    def grid(self, args):
        """The 2-D grid of the cooperative launch, checked against how many blocks can be co-resident."""
        if not course.SIMULATOR:
            argtypes = tuple(fused_steps_kernel.typeof_pyval(a) for a in args)
            kernel = fused_steps_kernel.compile(argtypes)    # compiled once per signature, then looked up
            most = kernel.max_cooperative_grid_blocks(self.threads)
            if self._blocks > most:
                raise ValueError(f"{self._blocks} blocks of {self.threads} threads cannot all be resident at once "
                                 f"(at most {most}): pass blocks=")
        return self.blocks

    def launch_phases(self, X_d, y_d, perm_d, step, losses, stream=0, phases=(1, 2, 3)):
        """The plain launches of step `step` (mode "phases"): phases A, B and C (1, 2, 3), or those named."""
        W1, b1, W2, b2 = self.W
        g, nt = self.blocks, self.threads
        if 1 in phases:
            partial_sums_kernel[g, nt, stream](X_d, perm_d, step, W1, self.Z)
        if 2 in phases:
            logits_kernel[g, nt, stream](b1, W2, self.Z, self.logits)
        if 3 in phases:
            update_kernel[g, nt, stream](X_d, y_d, perm_d, step, self.lr, W1, b1, W2, b2, self.Z, self.logits,
                                         self.done, losses)

    def launch_step(self, X_d, y_d, idx, loss, stream=0):
        """The launches of ONE step on the batch X_d[idx] (idx: (B,) device array of row numbers) on `stream`, the
        batch's mean loss added to loss[0]: one cooperative launch, or three in mode "phases"."""
        if self.mode == "phases":
            self.launch_phases(X_d, y_d, idx, 0, loss, stream)
        else:
            args = (X_d, y_d, idx, 0, 1, self.lr, *self.W, self.Z, self.logits, loss)
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
            args = (X_d, y_d, perm_d, step0, n, self.lr, *self.W, self.Z, self.logits, losses)
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
