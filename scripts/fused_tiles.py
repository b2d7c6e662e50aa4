"""EXPERIMENT (issue 13, item 3): the fused training loop in register-blocked tiles, two grid barriers per step, with
clocks inside the persistent kernel that say where each microsecond of a step goes.

Block b owns tile b of W1: TK inputs x TJ hidden units (98 x 8: 8 x 16 = 128 tiles for 784-128). A step s
(Z: the pre-activations, double-buffered: step s adds into Z[s % 2], zeroed again in phase C of step s):
  A. forward, per tile: stage the batch's TK inputs X[batch, tile] and the tile of W1 in shared memory, each
     thread sums a 2-row x 4-unit block of X W1 over 1/SEGS of the inputs, the SEGS shares are added in shared
     memory and once, atomically, into Z[s % 2].
  -- grid barrier: Z is complete --
  B. backward, per batch row r: H[r] = ReLU(Z[r] + b1), the logits (a warp per class), the softmax, dZ2[r] and
     dH[r] = (dZ2[r] W2^T) * [H[r] > 0], the loss.
  -- grid barrier: dZ2, dH, H are complete --
  C. update, per tile: dW1[tile] = X[batch, tile]^T dH[:, tile] (the same 2 x 4 blocking, the batch in SEGS_C
     shares) and W1[tile] -= lr dW1; per hidden unit j: W2[j], b1[j] (a warp per class); b2. Z[s % 2] zeroed.
  No barrier after C: the next step's phase A reads only the block's own tile of W1 and the other buffer of Z.

Same API as course.fused (FusedTrainer, fit_fused, sgd_epoch_ref). `FusedTrainer.epoch(..., clocks=T)` records
%globaltimer (ns) at six points of every step in thread 0 of every block: T (nsteps, blocks, 6)."""
import math
import time

import numpy as np
from numba import cuda, float32, int32, uint64, types

import course
from course.grad import mlp_grads_ref, mlp_loss_ref
from course.loss import zero_kernel
from course.train import evaluate, init_params
from course.update import check_loss
from course.util import cdiv, require

TJ = 8             # hidden units per tile (two groups of 4: a thread's 4 accumulators per row)
TK = 98            # inputs per tile (784 = 8 x 98)
XS = TK + 1        # row stride of the staged X[batch, tile] (odd: 32 rows at one input sit in 32 banks)
MAX_BATCH = 64     # rows r and r + 32 per thread
SEGS = 8           # phase A: shares of the TK inputs (SEGS * 64 threads)
SEGS_C = 4         # phase C: shares of the batch rows (SEGS_C * 128 threads)
KP = 64            # phase C: a thread's inputs kk and kk + KP
P_CELLS = 4096     # shared partial sums: SEGS x MAX_BATCH x TJ (A) and SEGS_C x 2 KP x TJ (C); sH in phase B
R0 = 2048          # phase B: sH = sP[:R0] (hidden <= R0), the logits' partial sums after it
NC_PAD = 16        # classes padded
UNROLL = 8         # loads in flight while staging
X_CELLS = MAX_BATCH * XS   # (shared arrays need plain constants)
W_CELLS = TK * TJ
DH_CELLS = MAX_BATCH * TJ
THREADS = 512
REGS = 128
_JIT = {} if course.SIMULATOR else dict(max_registers=REGS)
NPOINTS = 16       # clock points per step (0-5 the phase boundaries, 6-14 inside the phases)
PHASE_NAMES = ("A: forward tiles", "B: backward rows", "C: update tiles")

if course.SIMULATOR:
    def globaltimer():
        return uint64(time.perf_counter_ns())
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def globaltimer(typingctx):
        """The GPU's global nanosecond clock (PTX %globaltimer), the same on every SM."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l",
                               side_effect=True)
            return builder.call(asm, [])
        return types.uint64(), codegen


def sgd_epoch_ref(X, y, perm, params, batch_size, lr):
    """NumPy twin of one epoch of SGD (float64 gradients from course.grad's twins), batches perm[k*B:(k+1)*B]."""
    p = {k: np.asarray(v, np.float64).copy() for k, v in params.items()}
    losses = []
    for k0 in range(0, (len(perm) // batch_size) * batch_size, batch_size):
        idx = perm[k0:k0 + batch_size]
        Xb, yb = X[idx], y[idx]
        losses.append(mlp_loss_ref(Xb, yb, p["W1"], p["b1"], p["W2"], p["b2"]))
        g = mlp_grads_ref(Xb, yb, p["W1"], p["b1"], p["W2"], p["b2"])
        for name in p:
            p[name] -= lr * g[name]
    return np.array(losses), p


@cuda.jit(device=True)
def stamp(T, i, point):
    """T[i, block, point] = the global clock, by thread 0 (when T records step i)."""
    if cuda.threadIdx.x == 0 and i < T.shape[0]:
        T[i, cuda.blockIdx.x, point] = globaltimer()


@cuda.jit(device=True)
def lane_sums(sR, n):
    """Thread c < n: the sum of sR[lane * NC_PAD + c] over the block's lanes (blockDim / NC_PAD of them), four sums
    in flight. Every thread must call it (it waits for the partial sums first)."""
    cuda.syncthreads()
    lanes = cuda.blockDim.x // NC_PAD
    c = cuda.threadIdx.x
    s0 = float32(0.0)
    s1 = float32(0.0)
    if c < n:
        for lane in range(0, lanes, 2):
            s0 += sR[lane * NC_PAD + c]
            s1 += sR[(lane + 1) * NC_PAD + c]
    return s0 + s1


@cuda.jit(device=True)
def tile_origin(tile, hidden):
    """(k0, j0): the first input and the first hidden unit of tile `tile` (tiles numbered along the hidden units)."""
    jt = (hidden + TJ - 1) // TJ
    return (tile // jt) * TK, (tile % jt) * TJ


@cuda.jit(device=True)
def stage_rows(perm, base, B, sRows):
    """sRows[r] = perm[base + r]: the batch's rows of X."""
    for r in range(cuda.threadIdx.x, B, cuda.blockDim.x):
        sRows[r] = perm[base + r]
    cuda.syncthreads()


@cuda.jit(device=True)
def stage_x(X, sRows, B, k0, sX):
    """sX[r, kk] = X[rows[r], k0 + kk] for r < MAX_BATCH, kk < XS; zeros past the batch and past the inputs.
    UNROLL loads go out before the first store."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    K = X.shape[1]
    x = cuda.local.array(UNROLL, float32)
    for v0 in range(t, MAX_BATCH * XS, UNROLL * nt):
        for q in range(UNROLL):
            v = v0 + q * nt
            r = v // XS
            kk = v - r * XS
            x[q] = X[sRows[r], k0 + kk] if r < B and kk < TK and k0 + kk < K else float32(0.0)
        for q in range(UNROLL):
            v = v0 + q * nt
            if v < MAX_BATCH * XS:
                sX[v] = x[q]


@cuda.jit(device=True)
def stage_w(W1, k0, j0, sW):
    """sW[kk, jj] = W1[k0 + kk, j0 + jj] (TK x TJ), zeros past the edges."""
    K, hidden = W1.shape
    for v in range(cuda.threadIdx.x, TK * TJ, cuda.blockDim.x):
        kk = v // TJ
        jj = v - kk * TJ
        sW[v] = W1[k0 + kk, j0 + jj] if k0 + kk < K and j0 + jj < hidden else float32(0.0)


@cuda.jit(device=True)
def forward_partials(sX, sW, sP):
    """sP[seg, r, jj] = sum over kk = seg, seg + SEGS, ... of sX[r, kk] sW[kk, jj]: thread u = (seg, half, rp)
    sums rows rp and rp + 32 x units 4 half .. 4 half + 3 (8 accumulators, 6 loads per 8 multiply-adds)."""
    acc = cuda.local.array(8, float32)
    for u in range(cuda.threadIdx.x, SEGS * 64, cuda.blockDim.x):
        seg = u // 64
        half = (u // 32) % 2
        rp = uint64(u % 32)
        for q in range(8):
            acc[q] = float32(0.0)
        for kk in range(uint64(seg), uint64(TK), uint64(SEGS)):
            x0 = sX[rp * XS + kk]
            x1 = sX[(rp + 32) * XS + kk]
            w = kk * TJ + half * 4
            for q in range(4):
                acc[q] += x0 * sW[w + q]
                acc[4 + q] += x1 * sW[w + q]
        o = (seg * MAX_BATCH + rp) * TJ + half * 4
        for q in range(4):
            sP[o + q] = acc[q]
            sP[o + 32 * TJ + q] = acc[4 + q]
    cuda.syncthreads()


@cuda.jit(device=True)
def add_partials(sP, B, j0, Zb):
    """Zb[r, j0 + jj] += the SEGS shares of sP[:, r, jj], atomically (the tiles of other inputs add theirs)."""
    hidden = Zb.shape[1]
    for o in range(cuda.threadIdx.x, B * TJ, cuda.blockDim.x):
        r = o // TJ
        jj = o - r * TJ
        s = float32(0.0)
        for seg in range(SEGS):
            s += sP[seg * MAX_BATCH * TJ + o]
        if j0 + jj < hidden:
            cuda.atomic.add(Zb, (r, j0 + jj), s)
    cuda.syncthreads()


@cuda.jit(device=True)
def phase_a(X, perm, base, W1, Zb, sRows, sX, sW, sP, T, i):
    """Forward: every tile of this block adds X[batch, tile] W1[tile] into Zb."""
    B = Zb.shape[0]
    K, hidden = W1.shape
    stage_rows(perm, base, B, sRows)
    stamp(T, i, 6)
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    for tile in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
        k0, j0 = tile_origin(tile, hidden)
        stage_w(W1, k0, j0, sW)
        stage_x(X, sRows, B, k0, sX)
        cuda.syncthreads()
        stamp(T, i, 7)
        forward_partials(sX, sW, sP)
        stamp(T, i, 8)
        add_partials(sP, B, j0, Zb)


@cuda.jit(device=True)
def row_backward(r, label, Zb, b1, W2, b2, H, dZ2, dH, losses, step, sH, sR, sL, T, i):
    """Batch row r: H[r] = ReLU(Z[r] + b1), logits (a warp per class), softmax, dZ2[r], dH[r], the row's loss."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    C = W2.shape[1]
    for j in range(t, hidden, nt):
        h = max(Zb[r, j] + b1[j], float32(0.0))
        sH[j] = h
        H[r, j] = h
    cuda.syncthreads()
    stamp(T, i, 9)
    lane, c = t // NC_PAD, t % NC_PAD             # thread (lane, class): every (nt / NC_PAD)-th unit j
    acc = float32(0.0)
    if c < C:
        for j in range(lane, hidden, nt // NC_PAD):
            acc += sH[j] * W2[j, c]
    sR[t] = acc
    z = lane_sums(sR, C)
    if t < C:
        sL[t] = z + b2[t]
    cuda.syncthreads()
    stamp(T, i, 10)
    p = cuda.local.array(NC_PAD, float32)        # every thread: the row's softmax (C exps, no barrier)
    m = sL[0]
    for c in range(1, C):
        m = max(m, sL[c])
    s = float32(0.0)
    for c in range(NC_PAD):
        p[c] = math.exp(sL[c] - m) if c < C else float32(0.0)
        s += p[c]
    for c in range(NC_PAD):
        p[c] = (p[c] / s - (float32(1.0) if c == label else float32(0.0))) / float32(B)
    if t < C:
        dZ2[r, t] = p[t]
        if t == label:
            cuda.atomic.add(losses, step, (math.log(s) - (sL[t] - m)) / float32(B))
    for j in range(t, hidden, nt):
        g = float32(0.0)
        for c in range(NC_PAD):
            if c < C:
                g += p[c] * W2[j, c]
        dH[r, j] = g if sH[j] > float32(0.0) else float32(0.0)
    cuda.syncthreads()                           # sH and sL are reused by the next row


@cuda.jit(device=True)
def phase_b(y, perm, base, Zb, b1, W2, b2, H, dZ2, dH, losses, step, sP, T, i):
    """Backward: one batch row per block at a time."""
    B, hidden = H.shape
    sH = sP[:R0]                                 # H[r] (hidden <= R0)
    sR = sP[R0:R0 + 32 * NC_PAD]                 # partial sums of the logits
    sL = sP[P_CELLS - NC_PAD:]                   # the logits
    for r in range(cuda.blockIdx.x, B, cuda.gridDim.x):
        row_backward(r, y[perm[base + r]], Zb, b1, W2, b2, H, dZ2, dH, losses, step, sH, sR, sL, T, i)


@cuda.jit(device=True)
def tile_grads(sX, sdH, B, sP):
    """sP[seg, kk, jj] = sum over r = seg, seg + SEGS_C, ... of sX[r, kk] sdH[r, jj] for kk < 2 KP: thread
    u = (seg, half, kp) sums inputs kp and kp + KP x units 4 half .. 4 half + 3."""
    acc = cuda.local.array(8, float32)
    for u in range(cuda.threadIdx.x, SEGS_C * 2 * KP, cuda.blockDim.x):
        seg = u // (2 * KP)
        half = (u // KP) % 2
        kp = uint64(u % KP)
        k1 = uint64(min(kp + KP, XS - 1))         # past the tile: a zero column
        for q in range(8):
            acc[q] = float32(0.0)
        for r in range(uint64(seg), uint64(B), uint64(SEGS_C)):
            x0 = sX[r * XS + kp]
            x1 = sX[r * XS + k1]
            d = r * TJ + half * 4
            for q in range(4):
                acc[q] += x0 * sdH[d + q]
                acc[4 + q] += x1 * sdH[d + q]
        o = (seg * 2 * KP + kp) * TJ + half * 4
        for q in range(4):
            sP[o + q] = acc[q]
            sP[o + KP * TJ + q] = acc[4 + q]
    cuda.syncthreads()


@cuda.jit(device=True)
def update_tile(lr, W1, k0, j0, sP):
    """W1[k0 + kk, j0 + jj] -= lr * (the SEGS_C shares of sP[:, kk, jj])."""
    K, hidden = W1.shape
    for o in range(cuda.threadIdx.x, TK * TJ, cuda.blockDim.x):
        kk = o // TJ
        jj = o - kk * TJ
        g = float32(0.0)
        for seg in range(SEGS_C):
            g += sP[seg * 2 * KP * TJ + o]
        if k0 + kk < K and j0 + jj < hidden:
            W1[k0 + kk, j0 + jj] -= lr * g
    cuda.syncthreads()


@cuda.jit(device=True)
def update_unit(j, lr, H, dZ2, dH, W2, b1, b2, sR):
    """Hidden unit j < hidden: W2[j, c] -= lr sum_r H[r, j] dZ2[r, c] (c < C) and b1[j] -= lr sum_r dH[r, j]
    (c = C); j == hidden: b2[c] -= lr sum_r dZ2[r, c]. Thread (lane, c) sums every (nt / NC_PAD)-th row."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    C = W2.shape[1]
    lane, c = t // NC_PAD, t % NC_PAD
    acc = float32(0.0)
    for r in range(lane, B, nt // NC_PAD):
        if j == hidden:
            if c < C:
                acc += dZ2[r, c]
        elif c < C:
            acc += H[r, j] * dZ2[r, c]
        elif c == C:
            acc += dH[r, j]
    sR[t] = acc
    g = lane_sums(sR, C + 1)
    if j == hidden:
        if t < C:
            b2[t] -= lr * g
    elif t < C:
        W2[j, t] -= lr * g
    elif t == C:
        b1[j] -= lr * g
    cuda.syncthreads()                           # sR is reused by the next unit


@cuda.jit(device=True)
def phase_c(X, perm, base, lr, W1, b1, W2, b2, Zb, H, dZ2, dH, sRows, sX, sdH, sP, kept, T, i):
    """Update: every tile of this block (X[batch, tile] restaged unless `kept`: a block that owns one tile still
    holds it in sX from phase A), every hidden unit of this block, then Zb zeroed."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    K = W1.shape[0]
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    for j in range(cuda.blockIdx.x, hidden + 1, cuda.gridDim.x):
        update_unit(j, lr, H, dZ2, dH, W2, b1, b2, sP)
    stamp(T, i, 11)
    for tile in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
        k0, j0 = tile_origin(tile, hidden)
        for v in range(t, MAX_BATCH * TJ, nt):
            r = v // TJ
            jj = v - r * TJ
            sdH[v] = dH[r, j0 + jj] if r < B and j0 + jj < hidden else float32(0.0)
        if not kept:
            stage_x(X, sRows, B, k0, sX)
        cuda.syncthreads()
        stamp(T, i, 12)
        tile_grads(sX, sdH, B, sP)
        stamp(T, i, 13)
        update_tile(lr, W1, k0, j0, sP)
        stamp(T, i, 14)
    for e in range(cuda.grid(1), B * hidden, cuda.gridsize(1)):
        r = e // hidden
        Zb[r, e - r * hidden] = float32(0.0)


@cuda.jit(**_JIT)
def steps_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, Z, H, dZ2, dH, losses, T):
    """Steps step0 .. step0 + nsteps - 1 in one cooperative launch: phases A, B, C, two grid barriers a step."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    grid = cuda.cg.this_grid()
    B = H.shape[0]
    kept = ((W1.shape[0] + TK - 1) // TK) * ((W1.shape[1] + TJ - 1) // TJ) <= cuda.gridDim.x
    for i in range(nsteps):
        step = step0 + i
        Zb = Z[step % 2]
        stamp(T, i, 0)
        phase_a(X, perm, step * B, W1, Zb, sRows, sX, sW, sP, T, i)
        stamp(T, i, 1)
        grid.sync()
        stamp(T, i, 2)
        phase_b(y, perm, step * B, Zb, b1, W2, b2, H, dZ2, dH, losses, step, sP, T, i)
        stamp(T, i, 3)
        grid.sync()
        stamp(T, i, 4)
        phase_c(X, perm, step * B, lr, W1, b1, W2, b2, Zb, H, dZ2, dH, sRows, sX, sdH, sP, kept, T, i)
        cuda.syncthreads()
        stamp(T, i, 5)


@cuda.jit(**_JIT)
def phase_a_kernel(X, perm, step, W1, Z, T):
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    phase_a(X, perm, step * Z.shape[1], W1, Z[step % 2], sRows, sX, sW, sP, T, 0)


@cuda.jit(**_JIT)
def phase_b_kernel(y, perm, step, b1, W2, b2, Z, H, dZ2, dH, losses, T):
    sP = cuda.shared.array(P_CELLS, float32)
    phase_b(y, perm, step * H.shape[0], Z[step % 2], b1, W2, b2, H, dZ2, dH, losses, step, sP, T, 0)


@cuda.jit(**_JIT)
def phase_c_kernel(X, perm, step, lr, W1, b1, W2, b2, Z, H, dZ2, dH, T):
    sX = cuda.shared.array(X_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    B = H.shape[0]
    stage_rows(perm, step * B, B, sRows)
    phase_c(X, perm, step * B, lr, W1, b1, W2, b2, Z[step % 2], H, dZ2, dH, sRows, sX, sdH, sP, False, T, 0)


MODES = ("phases", "step", "epoch")
LAUNCHES_PER_STEP = {"phases": 3, "step": 1, "epoch": 0}


class FusedTrainer:
    """SGD on the MLP with the tiled fused kernels (same API as course.fused.FusedTrainer)."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        if not (1 <= C < NC_PAD and 1 <= batch_size <= MAX_BATCH and 1 <= hidden <= R0):
            raise ValueError(f"need at most {NC_PAD - 1} outputs, batch_size <= {MAX_BATCH}, hidden <= {R0}")
        self.params, self.lr, self.mode = params, np.float32(lr), mode
        self.threads = threads or course.pick(gpu=THREADS, sim=64)
        if self.threads % 32 or not 32 <= self.threads <= 512:
            raise ValueError(f"threads must be a multiple of 32 in [32, 512], got {self.threads}")
        self.W = (W1, b1, W2, b2)
        f32 = np.float32
        self.Z = cuda.to_device(np.zeros((2, batch_size, hidden), f32))
        self.H = cuda.device_array((batch_size, hidden), f32)
        self.dZ2 = cuda.device_array((batch_size, C), f32)
        self.dH = cuda.device_array((batch_size, hidden), f32)
        self.batch_size = batch_size
        self.ntiles = cdiv(K, TK) * cdiv(hidden, TJ)
        self._blocks = blocks
        self.no_clocks = cuda.device_array((0, 1, NPOINTS), np.uint64)

    def grid(self, args):
        if self._blocks:
            return self._blocks
        if course.SIMULATOR:
            return 1
        argtypes = tuple(steps_kernel.typeof_pyval(a) for a in args)
        kernel = steps_kernel.compile(argtypes)
        self._blocks = min(max(self.ntiles, self.batch_size), kernel.max_cooperative_grid_blocks(self.threads))
        return self._blocks

    def launch_phases(self, X_d, y_d, perm_d, step, losses, stream=0, phases=(1, 2, 3)):
        W1, b1, W2, b2 = self.W
        nb = self._blocks or max(self.ntiles, self.batch_size)
        nt = self.threads
        if 1 in phases:
            phase_a_kernel[nb, nt, stream](X_d, perm_d, step, W1, self.Z, self.no_clocks)
        if 2 in phases:
            phase_b_kernel[nb, nt, stream](y_d, perm_d, step, b1, W2, b2, self.Z, self.H, self.dZ2, self.dH, losses, self.no_clocks)
        if 3 in phases:
            phase_c_kernel[nb, nt, stream](X_d, perm_d, step, self.lr, W1, b1, W2, b2, self.Z, self.H, self.dZ2,
                                           self.dH, self.no_clocks)

    def phase_grids(self):
        nb = self._blocks or max(self.ntiles, self.batch_size)
        return nb, nb, nb

    def epoch(self, X_d, y_d, perm_d, losses, clocks=None):
        B = self.batch_size
        nsteps = perm_d.shape[0] // B
        zero_kernel[cdiv(nsteps, 256), 256](losses)
        if self.mode == "phases":
            for step in range(nsteps):
                self.launch_phases(X_d, y_d, perm_d, step, losses)
            return losses
        T = self.no_clocks if clocks is None else clocks
        chunks = [(s, 1) for s in range(nsteps)] if self.mode == "step" else [(0, nsteps)]
        for step0, n in chunks:
            args = (X_d, y_d, perm_d, step0, n, self.lr, *self.W, self.Z, self.H, self.dZ2, self.dH, losses, T)
            steps_kernel[self.grid(args), self.threads](*args)
        return losses


def fit_fused(X_train, y_train, X_test, y_test, hidden=128, epochs=10, batch_size=64, lr=0.1, seed=0,
              mode="epoch", threads=None, blocks=None, progress=True):
    """course.train.fit's SGD recipe through the tiled fused kernels."""
    n = (len(X_train) // batch_size) * batch_size
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
        hist["epoch"].append(dict(epoch=epoch, seconds=seconds, test_loss=test_loss, test_acc=test_acc))
        if progress:
            print(f"epoch {epoch:2d}  {seconds * 1e3:8.2f} ms  test loss {test_loss:.4f}  test accuracy {test_acc:.4f}")
    hist["params"] = params
    return hist
