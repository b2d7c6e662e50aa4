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
TKP = 104          # TK padded to a multiple of SEGS (zeros): every thread's loop has the same, constant length
XS = TKP + 1       # row stride of the staged X[batch, tile] (odd: 32 rows at one input sit in 32 banks)
MAX_BATCH = 64     # rows r and r + 32 per thread
SEGS = 8           # phase A: shares of the TK inputs (SEGS * 64 threads)
SEGS_C = 4         # phase C: shares of the batch rows (SEGS_C * 128 threads)
KP = 64            # phase C: a thread's inputs kk and kk + KP
P_CELLS = 4096     # shared partial sums: SEGS x MAX_BATCH x TJ (A) and SEGS_C x 2 KP x TJ (C); phase B below
H_MAX = 1024       # phase B: H[r] in sP[:H_MAX], the logits' partial sums in sP[H_MAX:W2_0], W2 in sP[W2_0:]
W2_0 = H_MAX + 512
NC_PAD = 16        # classes padded
UNROLL = 8         # loads in flight while staging
SKIP = 0           # TIMING ONLY (wrong results): 1 no unit updates, 2 no X staging, 4 no W2 staging
KEEP_W = 1         # a block that owns one tile keeps it in shared memory between steps
X_CELLS = MAX_BATCH * XS   # (shared arrays need plain constants)
W_CELLS = TKP * TJ
DH_CELLS = MAX_BATCH * TJ
DH_PER = 2 if not course.SIMULATOR else 8   # phase C: cells of sdH per thread (blocks >= DH_CELLS / DH_PER threads)
THREADS = 512
REGS = 128
XS_U = uint64(XS)  # unsigned: numba checks signed indices for wraparound (5 more instructions per load)
TJ_U = uint64(TJ)
_JIT = {} if course.SIMULATOR else dict(max_registers=REGS)
NPOINTS = 16       # clock points per step (0-5 the phase boundaries, 6-14 inside the phases)
PHASE_NAMES = ("A: forward tiles", "B: backward rows", "C: update tiles")

if course.SIMULATOR:
    def globaltimer():
        return uint64(time.perf_counter_ns())

    def prefetch_l2(X, i, k):
        pass
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

    @intrinsic
    def prefetch_l2(typingctx, X, i, k):
        """Ask for the 128-byte line of X[i, k] in the L2 cache (PTX prefetch.global.L2): nothing waits for it."""
        from numba.cuda import cgutils

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            inds = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], sig.args[1:])]
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, inds)
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ptr.type]), "prefetch.global.L2 [$0];", "l",
                               side_effect=True)
            builder.call(asm, [ptr])
            return context.get_dummy_value()
        return types.void(X, i, k), codegen


def ntiles_of(K, hidden):
    """Tiles of a K x hidden W1."""
    return cdiv(K, TK) * cdiv(hidden, TJ)


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
    """Thread c < n: the sum of sR[lane * NC_PAD + c] over the block's lanes (blockDim / NC_PAD <= 32 of them, a multiple of 4). Every thread must call it (it waits for the partial sums first)."""
    cuda.syncthreads()
    lanes = cuda.blockDim.x // NC_PAD
    c = cuda.threadIdx.x
    s0 = float32(0.0)
    s1 = float32(0.0)
    s2 = float32(0.0)
    s3 = float32(0.0)
    if c < n:
        for l4 in range(8):                      # constant length: the loads go out together
            if 4 * l4 < lanes:
                s0 += sR[(4 * l4) * NC_PAD + c]
                s1 += sR[(4 * l4 + 1) * NC_PAD + c]
                s2 += sR[(4 * l4 + 2) * NC_PAD + c]
                s3 += sR[(4 * l4 + 3) * NC_PAD + c]
    return (s0 + s1) + (s2 + s3)


@cuda.jit(device=True)
def tile_origin(tile, hidden):
    """(k0, j0): the first input and the first hidden unit of tile `tile` (tiles numbered along the hidden units)."""
    jt = (hidden + TJ - 1) // TJ
    return (tile // jt) * TK, (tile % jt) * TJ


@cuda.jit(device=True)
def stage_rows(perm, base, B, sRows):
    """sRows[r] = perm[base + r]: the batch's rows of X."""
    r = cuda.threadIdx.x
    while r < B:
        sRows[r] = perm[base + r]
        r += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def stage_x(X, sRows, B, k0, sX):
    """sX[r, kk] = X[rows[r], k0 + kk] for r < MAX_BATCH, kk < XS; zeros past the batch and past the inputs. Warp w
    stages rows w, w + warps, w + 2 warps, w + 3 warps at once, lane l their inputs l, l + 32, l + 64, l + 96:
    16 loads in flight per thread, no division."""
    K = X.shape[1]
    lane = cuda.threadIdx.x % 32
    warps = cuda.blockDim.x // 32
    x = cuda.local.array(16, float32)
    r0 = cuda.threadIdx.x // 32
    while r0 < MAX_BATCH:
        for p in range(4):
            r = r0 + p * warps
            row = uint64(sRows[min(r, B - 1)])
            for q in range(4):
                kk = lane + 32 * q
                ok = r < B and kk < TK and k0 + kk < K
                x[4 * p + q] = X[row, uint64(min(k0 + kk, K - 1))] if ok else float32(0.0)
        for p in range(4):
            r = r0 + p * warps
            for q in range(4):
                kk = lane + 32 * q
                if r < MAX_BATCH and kk < XS:
                    sX[r * XS + kk] = x[4 * p + q]
        r0 += 4 * warps


@cuda.jit(device=True)
def stage_w(W1, k0, j0, sW):
    """sW[kk, jj] = W1[k0 + kk, j0 + jj] (TK x TJ), zeros past the edges."""
    K, hidden = W1.shape
    v = cuda.threadIdx.x
    while v < TKP * TJ:
        kk = v // TJ
        jj = v - kk * TJ
        sW[v] = W1[k0 + kk, j0 + jj] if kk < TK and k0 + kk < K and j0 + jj < hidden else float32(0.0)
        v += cuda.blockDim.x


@cuda.jit(device=True)
def forward_partials(sX, sW, sP):
    """sP[seg, r, jj] = sum over kk = seg, seg + SEGS, ... of sX[r, kk] sW[kk, jj]: thread u = (seg, half, rp)
    sums rows rp and rp + 32 x units 4 half .. 4 half + 3 (8 accumulators, 6 loads per 8 multiply-adds)."""
    acc = cuda.local.array(8, float32)
    u = cuda.threadIdx.x
    while u < SEGS * 64:
        seg = uint64(u // 64)
        half = uint64((u // 32) % 2)
        rp = uint64(u % 32)
        for q in range(8):
            acc[q] = float32(0.0)
        ix = rp * XS_U + seg                     # sX[rp, seg]
        iw = seg * TJ_U + half * uint64(4)       # sW[seg, 4 half]
        for _ in range(TKP // SEGS):              # constant length: unrolled, the loads scheduled ahead
            x0 = sX[ix]
            x1 = sX[ix + uint64(32 * XS)]
            for q in range(4):
                w = sW[iw + uint64(q)]
                acc[q] += x0 * w
                acc[4 + q] += x1 * w
            ix += uint64(SEGS)
            iw += uint64(SEGS * TJ)
        o = (seg * uint64(MAX_BATCH) + rp) * TJ_U + half * uint64(4)
        for q in range(4):
            sP[o + uint64(q)] = acc[q]
            sP[o + uint64(32 * TJ + q)] = acc[4 + q]
        u += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def add_partials(sP, B, j0, Z):
    """Z[r, j0 + jj] += the SEGS shares of sP[:, r, jj], atomically (the tiles of other inputs add theirs)."""
    hidden = Z.shape[1]
    o = cuda.threadIdx.x
    while o < B * TJ:
        r = o // TJ
        jj = o - r * TJ
        s = float32(0.0)
        for seg in range(SEGS):
            s += sP[seg * MAX_BATCH * TJ + o]
        if j0 + jj < hidden:
            cuda.atomic.add(Z, (r, j0 + jj), s)
        o += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def phase_a(X, perm, base, W1, Z, sRows, sX, sW, sP, origin, fresh, T, i):
    """Forward: every tile of this block adds X[batch, tile] W1[tile] into Z. The tile of W1 is staged when
    `fresh` (else sW still holds it, as phase C left it). origin: tile_origin of the block's first tile."""
    B = Z.shape[0]
    K, hidden = W1.shape
    stage_rows(perm, base, B, sRows)
    stamp(T, i, 6)
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    tile = cuda.blockIdx.x
    k0, j0 = origin
    while tile < ntiles:
        if fresh or not KEEP_W:
            stage_w(W1, k0, j0, sW)
            cuda.syncthreads()
        stamp(T, i, 15)
        if not SKIP & 2:
            stage_x(X, sRows, B, k0, sX)
        cuda.syncthreads()
        stamp(T, i, 7)
        forward_partials(sX, sW, sP)
        stamp(T, i, 8)
        add_partials(sP, B, j0, Z)
        tile += cuda.gridDim.x
        k0, j0 = tile_origin(tile, hidden)


@cuda.jit(device=True)
def load_w2(W2, j0, c, lanes, w):
    """w[m] = W2[j0 + m * lanes, c] for m < 4 (clamped inside W2: only stored where in range)."""
    hidden, C = W2.shape
    for m in range(4):
        w[m] = W2[min(j0 + m * lanes, hidden - 1), min(c, C - 1)]


@cuda.jit(device=True)
def row_backward(r, label, Z, b1, W2, b2, H, dZ2, dH, losses, step, sP, sS, T, i):
    """Batch row r: H[r] = ReLU(Z[r] + b1) (Z[r] zeroed for the next step), the logits (thread (lane, class) sums
    every lanes-th unit), softmax, dZ2[r], dH[r] = (dZ2[r] W2^T) * [H[r] > 0], the row's loss. W2 is staged in
    shared memory with H[r]: every load of the row goes out at once."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    C = W2.shape[1]
    sH = sP[:H_MAX]
    sR = sP[H_MAX:W2_0]
    sW2 = sP[W2_0:]
    lane, c = t // NC_PAD, t % NC_PAD
    lanes = nt // NC_PAD
    w = cuda.local.array(4, float32)
    j0 = lane
    load_w2(W2, j0, c, lanes, w)                 # in flight while H[r] loads
    j = t
    while j < hidden:
        h = max(Z[r, j] + b1[j], float32(0.0))
        Z[r, j] = float32(0.0)                   # read once: zero again for the next step's sums
        sH[j] = h
        H[r, j] = h
        j += nt
    while j0 < hidden and not SKIP & 4:
        for m in range(4):
            jm = j0 + m * lanes
            if jm < hidden and c < C:
                sW2[jm * C + c] = w[m]
        j0 += 4 * lanes
        load_w2(W2, j0, c, lanes, w)
    cuda.syncthreads()
    stamp(T, i, 9)
    acc = cuda.local.array(4, float32)           # thread (lane, c): units lane, lane + lanes, ... four at a time
    for m in range(4):
        acc[m] = float32(0.0)
    if c < C:
        j0 = lane
        while j0 < hidden:
            for m in range(4):
                jm = min(j0 + m * lanes, H_MAX - 1)
                acc[m] += sH[jm] * sW2[jm * C + c] if j0 + m * lanes < hidden else float32(0.0)
            j0 += 4 * lanes
    sP[H_MAX + t] = (acc[0] + acc[1]) + (acc[2] + acc[3])
    z = lane_sums(sR, C)
    if t < C:
        sS[t] = z + b2[t]
    cuda.syncthreads()
    stamp(T, i, 10)
    if t < C:                                    # thread c: (P[c] - onehot[c]) / B
        m = sS[0]
        for c2 in range(1, NC_PAD):              # constant length: unrolled, the loads go out together
            if c2 < C:
                m = max(m, sS[c2])
        s = float32(0.0)
        for c2 in range(NC_PAD):
            if c2 < C:
                s += math.exp(sS[c2] - m)
        dz = (math.exp(sS[t] - m) / s - (float32(1.0) if t == label else float32(0.0))) / float32(B)
        dZ2[r, t] = dz
        sS[NC_PAD + t] = dz
        if t == label:
            cuda.atomic.add(losses, step, (math.log(s) - (sS[t] - m)) / float32(B))
    cuda.syncthreads()
    j = t
    while j < hidden:
        g = float32(0.0)
        for c2 in range(NC_PAD):
            if c2 < C:
                g += sS[NC_PAD + c2] * sW2[j * C + c2]
        dH[r, j] = g if sH[j] > float32(0.0) else float32(0.0)
        j += nt
    cuda.syncthreads()                           # sP and sS are reused by the next row


@cuda.jit(device=True)
def phase_b(y, perm, base, X, Z, b1, W2, b2, H, dZ2, dH, losses, step, sP, sS, T, i):
    """Backward: one batch row per block at a time; the blocks without a row ask the L2 cache for the next batch's
    rows of X (a 128-byte line per thread), so that the next phase A stages them from L2, not from DRAM."""
    B = H.shape[0]
    K = X.shape[1]
    r = cuda.blockIdx.x
    while r < B:
        row_backward(r, y[perm[base + r]], Z, b1, W2, b2, H, dZ2, dH, losses, step, sP, sS, T, i)
        r += cuda.gridDim.x
    if cuda.blockIdx.x >= B and base + 2 * B <= perm.shape[0]:
        lines = (K + 31) // 32 + 1               # 128-byte lines of a row of X (one more when unaligned)
        v = (cuda.blockIdx.x - B) * cuda.blockDim.x + cuda.threadIdx.x
        while v < B * lines:
            rr = v // lines
            prefetch_l2(X, perm[base + B + rr], min((v - rr * lines) * 32, K - 1))
            v += (cuda.gridDim.x - B) * cuda.blockDim.x


@cuda.jit(device=True)
def tile_grads(sX, sdH, B, sP):
    """sP[seg, kk, jj] = sum over r = seg, seg + SEGS_C, ... of sX[r, kk] sdH[r, jj] for kk < 2 KP: thread
    u = (seg, half, kp) sums inputs kp and kp + KP x units 4 half .. 4 half + 3."""
    acc = cuda.local.array(8, float32)
    u = cuda.threadIdx.x
    while u < SEGS_C * 2 * KP:
        seg = uint64(u // (2 * KP))
        half = uint64((u // KP) % 2)
        kp = uint64(u % KP)
        k1 = uint64(min(u % KP + KP, XS - 1))    # past the tile: a zero column
        for q in range(8):
            acc[q] = float32(0.0)
        ix = seg * XS_U                          # sX[seg, 0]
        idh = seg * TJ_U + half * uint64(4)      # sdH[seg, 4 half]
        for _ in range(MAX_BATCH // SEGS_C):      # rows past the batch are zeros in sX and sdH
            x0 = sX[ix + kp]
            x1 = sX[ix + k1]
            for q in range(4):
                d = sdH[idh + uint64(q)]
                acc[q] += x0 * d
                acc[4 + q] += x1 * d
            ix += uint64(SEGS_C * XS)
            idh += uint64(SEGS_C * TJ)
        o = (seg * uint64(2 * KP) + kp) * TJ_U + half * uint64(4)
        for q in range(4):
            sP[o + uint64(q)] = acc[q]
            sP[o + uint64(KP * TJ + q)] = acc[4 + q]
        u += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def update_tile(lr, W1, k0, j0, sW, sP):
    """W1[k0 + kk, j0 + jj] = sW[kk, jj] - lr * (the SEGS_C shares of sP[:, kk, jj]): sW holds the tile as phase A
    read it, so nothing waits for a load."""
    K, hidden = W1.shape
    o = cuda.threadIdx.x
    while o < TK * TJ:
        kk = o // TJ
        jj = o - kk * TJ
        g = float32(0.0)
        for seg in range(SEGS_C):
            g += sP[seg * 2 * KP * TJ + o]
        if k0 + kk < K and j0 + jj < hidden:
            w = sW[o] - lr * g
            sW[o] = w                            # the block's copy stays current (phase A need not restage it)
            W1[k0 + kk, j0 + jj] = w
        o += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def update_unit(j, lr, H, dZ2, dH, W2, b1, b2, sR):
    """Hidden unit j < hidden: W2[j, c] -= lr sum_r H[r, j] dZ2[r, c] (c < C) and b1[j] -= lr sum_r dH[r, j]
    (c = C); j == hidden: b2[c] -= lr sum_r dZ2[r, c]. Thread (lane, c) sums two rows at a time."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    C = W2.shape[1]
    lane, c = t // NC_PAD, t % NC_PAD
    lanes = nt // NC_PAD
    old = float32(0.0)                           # the parameter this thread updates, loaded before the sums
    if t < C + 1:
        if j == hidden:
            old = b2[min(t, C - 1)]
        elif t < C:
            old = W2[j, t]
        else:
            old = b1[j]
    acc0 = float32(0.0)
    acc1 = float32(0.0)
    r = lane
    while r < B:          # rows r and r + lanes: both loads in flight
        r1 = min(r + lanes, B - 1)
        on = float32(1.0) if r + lanes < B else float32(0.0)
        if j == hidden:
            if c < C:
                acc0 += dZ2[r, c]
                acc1 += on * dZ2[r1, c]
        elif c < C:
            acc0 += H[r, j] * dZ2[r, c]
            acc1 += on * H[r1, j] * dZ2[r1, c]
        elif c == C:
            acc0 += dH[r, j]
            acc1 += on * dH[r1, j]
        r += 2 * lanes
    sR[t] = acc0 + acc1
    g = lane_sums(sR, C + 1)
    if j == hidden:
        if t < C:
            b2[t] = old - lr * g
    elif t < C:
        W2[j, t] = old - lr * g
    elif t == C:
        b1[j] = old - lr * g
    cuda.syncthreads()                           # sR is reused by the next unit


@cuda.jit(device=True)
def load_dh(dH, j0, d):
    """d[q] = dH[r, j0 + jj] for cell v = t + q * blockDim = r * TJ + jj of sdH (zeros past the edges)."""
    B, hidden = dH.shape
    for q in range(DH_PER):
        v = cuda.threadIdx.x + q * cuda.blockDim.x
        r = v // TJ
        jj = v - r * TJ
        d[q] = dH[min(r, B - 1), min(j0 + jj, hidden - 1)] if r < B and j0 + jj < hidden else float32(0.0)


@cuda.jit(device=True)
def phase_c(X, lr, W1, b1, W2, b2, H, dZ2, dH, sRows, sX, sW, sdH, sP, origin, kept, T, i):
    """Update: the hidden units of this block (unit hidden - block first: block 0 takes b2), then every tile of
    this block (X[batch, tile] and the tile of W1 restaged unless `kept`: a block that owns one tile still holds
    both in shared memory from phase A)."""
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    B, hidden = H.shape
    K = W1.shape[0]
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    d = cuda.local.array(DH_PER, float32)
    tile = cuda.blockIdx.x
    k0, j0 = origin
    load_dh(dH, j0, d)                           # in flight during the unit updates
    u = cuda.blockIdx.x
    while u < hidden + 1 and not SKIP & 1:
        update_unit(hidden - u, lr, H, dZ2, dH, W2, b1, b2, sP)
        u += cuda.gridDim.x
    stamp(T, i, 11)
    while tile < ntiles:
        for q in range(DH_PER):
            v = t + q * nt
            if v < DH_CELLS:
                sdH[v] = d[q]
        if not kept:
            stage_x(X, sRows, B, k0, sX)
            stage_w(W1, k0, j0, sW)
        cuda.syncthreads()
        stamp(T, i, 12)
        tile_grads(sX, sdH, B, sP)
        stamp(T, i, 13)
        update_tile(lr, W1, k0, j0, sW, sP)
        stamp(T, i, 14)
        tile += cuda.gridDim.x
        k0, j0 = tile_origin(tile, hidden)
        load_dh(dH, j0, d)


@cuda.jit(**_JIT)
def steps_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, Z, H, dZ2, dH, losses, T):
    """Steps step0 .. step0 + nsteps - 1 in one cooperative launch: phases A, B, C, two grid barriers a step."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    sS = cuda.shared.array(32, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    grid = cuda.cg.this_grid()
    B = H.shape[0]
    kept = ((W1.shape[0] + TK - 1) // TK) * ((W1.shape[1] + TJ - 1) // TJ) <= cuda.gridDim.x
    origin = tile_origin(cuda.blockIdx.x, W1.shape[1])    # (k0, j0) of the block's first tile, once
    for i in range(nsteps):
        step = step0 + i
        stamp(T, i, 0)
        phase_a(X, perm, step * B, W1, Z, sRows, sX, sW, sP, origin, not kept or i == 0, T, i)
        stamp(T, i, 1)
        grid.sync()                              # Z is complete
        stamp(T, i, 2)
        phase_b(y, perm, step * B, X, Z, b1, W2, b2, H, dZ2, dH, losses, step, sP, sS, T, i)
        stamp(T, i, 3)
        grid.sync()                              # H, dZ2, dH are complete; Z is zero again
        stamp(T, i, 4)
        phase_c(X, lr, W1, b1, W2, b2, H, dZ2, dH, sRows, sX, sW, sdH, sP, origin, kept, T, i)
        stamp(T, i, 5)


@cuda.jit(**_JIT)
def phase_a_kernel(X, perm, step, W1, Z, T):
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    phase_a(X, perm, step * Z.shape[0], W1, Z, sRows, sX, sW, sP, tile_origin(cuda.blockIdx.x, W1.shape[1]), True,
            T, 0)


@cuda.jit(**_JIT)
def phase_b_kernel(y, perm, step, X, b1, W2, b2, Z, H, dZ2, dH, losses, T):
    sP = cuda.shared.array(P_CELLS, float32)
    sS = cuda.shared.array(32, float32)
    phase_b(y, perm, step * H.shape[0], X, Z, b1, W2, b2, H, dZ2, dH, losses, step, sP, sS, T, 0)


@cuda.jit(**_JIT)
def phase_c_kernel(X, perm, step, lr, W1, b1, W2, b2, H, dZ2, dH, T):
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    sRows = cuda.shared.array(MAX_BATCH, int32)
    B = H.shape[0]
    stage_rows(perm, step * B, B, sRows)
    phase_c(X, lr, W1, b1, W2, b2, H, dZ2, dH, sRows, sX, sW, sdH, sP, tile_origin(cuda.blockIdx.x, W1.shape[1]),
            False, T, 0)


MODES = ("phases", "step", "epoch")
LAUNCHES_PER_STEP = {"phases": 3, "step": 1, "epoch": 0}


class FusedTrainer:
    """SGD on the MLP with the tiled fused kernels (same API as course.fused.FusedTrainer)."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        if not (1 <= C < NC_PAD and 1 <= batch_size <= MAX_BATCH and 1 <= hidden <= H_MAX and hidden * C <= P_CELLS - W2_0):
            raise ValueError(f"need at most {NC_PAD - 1} outputs, batch_size <= {MAX_BATCH}, hidden <= {H_MAX}")
        self.params, self.lr, self.mode = params, np.float32(lr), mode
        self.threads = threads or course.pick(gpu=THREADS, sim=64)
        if self.threads % 64 or not DH_CELLS // DH_PER <= self.threads <= 512:
            raise ValueError(f"threads must be a multiple of 64 in [{DH_CELLS // DH_PER}, 512], got {self.threads}")
        self.W = (W1, b1, W2, b2)
        f32 = np.float32
        self.Z = cuda.to_device(np.zeros((batch_size, hidden), f32))   # zero between steps
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
        self._blocks = min(max(self.ntiles, self.batch_size, self.W[0].shape[1] + 1),
                           kernel.max_cooperative_grid_blocks(self.threads))
        return self._blocks

    def launch_phases(self, X_d, y_d, perm_d, step, losses, stream=0, phases=(1, 2, 3)):
        W1, b1, W2, b2 = self.W
        nb = self._blocks or max(self.ntiles, self.batch_size)
        nt = self.threads
        if 1 in phases:
            phase_a_kernel[nb, nt, stream](X_d, perm_d, step, W1, self.Z, self.no_clocks)
        if 2 in phases:
            phase_b_kernel[nb, nt, stream](y_d, perm_d, step, X_d, b1, W2, b2, self.Z, self.H, self.dZ2, self.dH, losses, self.no_clocks)
        if 3 in phases:
            phase_c_kernel[nb, nt, stream](X_d, perm_d, step, self.lr, W1, b1, W2, b2, self.H, self.dZ2,
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
