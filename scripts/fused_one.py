"""EXPERIMENT (issue 13), not adopted: course.fused with ONE grid barrier per step instead of two. It checks against
the NumPy twin but runs 28.6 ms an epoch on the H200 (results/fused-h200.json, "tried, not adopted").

Phase A is course.fused's (a block owns a tile of W1, 98 inputs x 8 units, and adds X[batch, tile] W1[tile] into Z
with atomics). After the one barrier, EVERY block does phase B for the whole batch (64 rows x 128 units of Z from
the L2 cache: 32 KB a block) instead of one row per block, so nothing it needs comes from another block's phase B:
- the logits, softmax and dZ2 of every row (8 lanes a row, warp shuffles), into shared memory;
- its hidden unit j: W2[j], b1[j] (a warp per class), and b2 in the block that owns unit `hidden`;
- dH[:, tile] of its own tile, then dW1[tile] and W1[tile] as in course.fused;
- meanwhile the next step's X[batch, tile] loads into 16 registers a thread, stored after the sums of dW1.
What the other blocks read while a block writes is double- or triple-buffered: W2, b1, b2 (step i reads copy i % 2
and writes copy (i + 1) % 2; step 0 reads the parameters themselves, the launch's end writes them back), and Z
(step i adds into Zb[i % 3]; after the barrier every block zeroes its share of Zb[(i + 2) % 3], read last by step
i - 1, added into next by step i + 2)."""
import math

import numpy as np
from numba import cuda, float32, uint64

import course
from course.fused import (DH_CELLS, MAX_BATCH, NC_PAD, NPOINTS, P_CELLS, REGS, TJ, TK, W_CELLS, X_CELLS, XS,
                          add_partials, forward_partials, stage_w, stamp, tile_grads, tile_origin, update_tile,
                          sgd_epoch_ref)  # noqa: F401  (sgd_epoch_ref: for the tests)
from course.loss import zero_kernel
from course.util import cdiv, require

PARTS = 8            # lanes per batch row in phase B: lane p sums units p, p + 8, ...
UNROLL = 16          # units a lane loads at once: 16 x 8 = 128 a pass
SDS = NC_PAD + 1     # row stride of dZ2 in shared memory (odd: a warp reading 32 rows hits 32 banks)
SD0 = 0              # sP during phase B: dZ2 (MAX_BATCH x SDS), H[:, j] and dH[:, j] of the unit, b2, W2
HU0 = MAX_BATCH * SDS
DHU0 = HU0 + MAX_BATCH
B20 = DHU0 + MAX_BATCH
W2_0 = 1536
SCR_CELLS = 512 if course.SIMULATOR else 1   # the simulator's shuffles go through shared memory
THREADS = 512
MODES = ("phases", "step", "epoch")

_JIT = {} if course.SIMULATOR else dict(max_registers=REGS)

if course.SIMULATOR:
    def shfl_xor(scr, v, m):
        """The simulator has no shuffles: exchange through shared memory (every thread of the block calls it)."""
        t = cuda.threadIdx.x
        cuda.syncthreads()
        scr[t] = v
        cuda.syncthreads()
        return scr[t ^ m]
else:
    @cuda.jit(device=True, inline=True)
    def shfl_xor(scr, v, m):
        """v of lane (lane ^ m) of this warp."""
        return cuda.shfl_xor_sync(0xFFFFFFFF, v, m)


@cuda.jit(device=True)
def warp_sum(scr, v):
    """The sum of v over the 32 lanes of the warp (every lane gets it)."""
    v += shfl_xor(scr, v, 1)
    v += shfl_xor(scr, v, 2)
    v += shfl_xor(scr, v, 4)
    v += shfl_xor(scr, v, 8)
    v += shfl_xor(scr, v, 16)
    return v


@cuda.jit(device=True)
def load_x(X, perm, base, B, k0, r0, x):
    """x[4 p + q] = X[perm[base + r], k0 + kk] for the rows r = r0 + p warps and inputs kk = lane + 32 q of the
    tile (zeros past the batch and the tile): 16 loads in flight, nobody waits."""
    K = X.shape[1]
    lane = cuda.threadIdx.x % 32
    warps = cuda.blockDim.x // 32
    for p in range(4):
        r = r0 + p * warps
        row = uint64(perm[base + min(r, B - 1)])
        for q in range(4):
            kk = lane + 32 * q
            ok = r < B and kk < TK and k0 + kk < K
            x[4 * p + q] = X[row, uint64(min(k0 + kk, K - 1))] if ok else float32(0.0)


@cuda.jit(device=True)
def store_x(sX, r0, x):
    """sX[r, kk] = what load_x loaded, for r < MAX_BATCH, kk < XS."""
    lane = cuda.threadIdx.x % 32
    warps = cuda.blockDim.x // 32
    for p in range(4):
        r = r0 + p * warps
        for q in range(4):
            kk = lane + 32 * q
            if r < MAX_BATCH and kk < XS:
                sX[r * XS + kk] = x[4 * p + q]


@cuda.jit(device=True)
def stage_x(X, perm, base, B, k0, sX, x):
    """sX[r, kk] = X[perm[base + r], k0 + kk], every row r < MAX_BATCH (zeros past the batch)."""
    r0 = cuda.threadIdx.x // 32
    while r0 < MAX_BATCH:
        load_x(X, perm, base, B, k0, r0, x)
        store_x(sX, r0, x)
        r0 += 4 * (cuda.blockDim.x // 32)


@cuda.jit(device=True)
def forward(X, perm, base, W1, Z, sX, sW, sP, x, origin, fresh_w, fresh_x, T, i):
    """Phase A: every tile of this block adds X[batch, tile] W1[tile] into Z. sW (the tile of W1) is staged when
    fresh_w, sX (X[batch, tile]) when fresh_x; otherwise they hold it already."""
    B = Z.shape[0]
    K, hidden = W1.shape
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    tile = cuda.blockIdx.x
    k0, j0 = origin
    while tile < ntiles:
        if fresh_w:
            stage_w(W1, k0, j0, sW)
        if fresh_x:
            stage_x(X, perm, base, B, k0, sX, x)
        cuda.syncthreads()
        stamp(T, i, 1)
        forward_partials(sX, sW, sP)
        stamp(T, i, 2)
        add_partials(sP, B, j0, Z)
        tile += cuda.gridDim.x
        k0, j0 = tile_origin(tile, hidden)


@cuda.jit(device=True)
def stage_w2(W2r, b1r, b2r, sP):
    """sP[W2_0 + j NC_PAD + c] = W2r[j, c], sP[B20 + c] = b2r[c] (zeros for c >= C), then b1 (sP[B1_0 + j]):
    4 loads in flight a thread."""
    hidden, C = W2r.shape
    t, nt = cuda.threadIdx.x, cuda.blockDim.x
    w = cuda.local.array(4, float32)
    v0 = t
    while v0 < hidden * NC_PAD:
        for q in range(4):
            v = v0 + q * nt
            j, c = v // NC_PAD, v % NC_PAD
            w[q] = W2r[min(j, hidden - 1), min(c, C - 1)] if c < C else float32(0.0)
        for q in range(4):
            v = v0 + q * nt
            if v < hidden * NC_PAD:
                sP[W2_0 + v] = w[q]
        v0 += 4 * nt
    if t < NC_PAD:
        sP[B20 + t] = b2r[min(t, C - 1)] if t < C else float32(0.0)
    j = t
    while j < hidden:
        sP[W2_0 + hidden * NC_PAD + j] = b1r[j]
        j += nt
    cuda.syncthreads()


@cuda.jit(device=True)
def softmax_rows(Z, y, perm, base, b1r, C, sP, losses, step, scr, count, T, i):
    """Every row r of the batch: the logits of H[r] = ReLU(Z[r] + b1) (lane p of the row's 8 sums units p, p + 8,
    ...; shuffles add the 8), the softmax and dZ2[r] = (P - onehot) / B into sP[SD0 + r SDS + c]; block 0 adds the
    row's loss / B into losses[step] when `count`."""
    t = cuda.threadIdx.x
    B, hidden = Z.shape
    part = t % PARTS
    acc = cuda.local.array(NC_PAD, float32)
    h = cuda.local.array(UNROLL, float32)
    r0 = 0
    while r0 < B:                                # the same trips in every thread: shuffles need them all
        r = r0 + t // PARTS
        rr = min(r, B - 1)
        label = y[perm[base + rr]]
        for c in range(NC_PAD):
            acc[c] = float32(0.0)
        zrow = Z[rr]
        b1 = W2_0 + hidden * NC_PAD
        j0 = 0
        while j0 < hidden:
            for m in range(UNROLL):              # the loads first, all in flight
                j = uint64(j0 + part + PARTS * m)
                h[m] = zrow[j] + sP[b1 + j] if j < hidden else float32(0.0)
            for m in range(UNROLL):              # no branches: W2's columns past C are zeros
                j = j0 + part + PARTS * m
                hm = max(h[m], float32(0.0)) if j < hidden else float32(0.0)
                jc = W2_0 + min(j, hidden - 1) * NC_PAD
                for c in range(NC_PAD):
                    acc[c] += hm * sP[jc + c]
            j0 += PARTS * UNROLL
        stamp(T, i, 12)
        mx = float32(-3.0e38)
        for c in range(NC_PAD):                  # every class (zeros past C): no branches
            v = acc[c]
            v += shfl_xor(scr, v, 1)
            v += shfl_xor(scr, v, 2)
            v += shfl_xor(scr, v, 4)
            acc[c] = v + sP[B20 + c]
            if c < C:
                mx = max(mx, acc[c])
        s = float32(0.0)
        zl = float32(0.0)
        for c in range(NC_PAD):
            if c < C:
                s += math.exp(acc[c] - mx)
                if c == label:
                    zl = acc[c]
        if r < B:
            for c in range(NC_PAD):
                if c < C and c % PARTS == part:
                    p = math.exp(acc[c] - mx) / s
                    sP[SD0 + r * SDS + c] = (p - (float32(1.0) if c == label else float32(0.0))) / float32(B)
            if part == 0 and cuda.blockIdx.x == 0 and count:
                cuda.atomic.add(losses, step, (math.log(s) - (zl - mx)) / float32(B))
        r0 += cuda.blockDim.x // PARTS
    cuda.syncthreads()


@cuda.jit(device=True)
def update_units(lr, Z, b1r, C, W2w, b1w, b2w, sP, scr):
    """Unit j of this block (u = block, block + grid, ...; u == hidden: b2): W2[j, c] -= lr sum_r H[r, j] dZ2[r, c]
    and b1[j] -= lr sum_r dH[r, j] into the copies W2w, b1w, b2w (a warp per class, and one for b1)."""
    t = cuda.threadIdx.x
    B, hidden = Z.shape
    lane, w, nwarps = t % 32, t // 32, cuda.blockDim.x // 32
    u = cuda.blockIdx.x
    while u < hidden + 1:
        j = min(u, hidden - 1)
        if t < B:
            hz = Z[t, j] + sP[W2_0 + hidden * NC_PAD + j]
            g = float32(0.0)
            for c in range(NC_PAD):
                if c < C:
                    g += sP[SD0 + t * SDS + c] * sP[W2_0 + j * NC_PAD + c]
            sP[HU0 + t] = max(hz, float32(0.0))
            sP[DHU0 + t] = g if hz > float32(0.0) else float32(0.0)
        cuda.syncthreads()
        q0 = 0
        while q0 < C + 1:                        # the same trips in every warp
            q = q0 + w
            s = float32(0.0)
            for half in range(2):
                r = lane + 32 * half
                if r < B and q <= C:
                    if u == hidden:
                        s += sP[SD0 + r * SDS + q] if q < C else float32(0.0)
                    elif q < C:
                        s += sP[HU0 + r] * sP[SD0 + r * SDS + q]
                    else:
                        s += sP[DHU0 + r]
            s = warp_sum(scr, s)
            if lane == 0 and q <= C:
                if u == hidden:
                    if q < C:
                        b2w[q] = sP[B20 + q] - lr * s
                elif q < C:
                    W2w[j, q] = sP[W2_0 + j * NC_PAD + q] - lr * s
                else:
                    b1w[j] = b1r[j] - lr * s
            q0 += nwarps
        cuda.syncthreads()
        u += cuda.gridDim.x


@cuda.jit(device=True)
def stage_dh(Z, b1r, C, j0, sP, sdH):
    """sdH[r, jj] = dH[r, j0 + jj] = (dZ2[r] W2[j0 + jj]^T) [Z[r, j] + b1[j] > 0] (zeros past the batch and W2)."""
    B, hidden = Z.shape
    v = cuda.threadIdx.x
    while v < DH_CELLS:
        r = v // TJ
        j = j0 + v % TJ
        d = float32(0.0)
        if r < B and j < hidden:
            if Z[r, j] + sP[W2_0 + hidden * NC_PAD + j] > float32(0.0):
                for c in range(NC_PAD):
                    if c < C:
                        d += sP[SD0 + r * SDS + c] * sP[W2_0 + j * NC_PAD + c]
        sdH[v] = d
        v += cuda.blockDim.x


@cuda.jit(device=True)
def backward_update(X, y, perm, step, lr, W1, Z, Zfree, old, new, losses, sX, sW, sP, sdH, scr, x, origin, kept,
                    ahead, T, i):
    """Everything after the barrier: phase B for the whole batch, this block's units and tiles updated. old, new:
    (W2, b1, b2) read and written; Zfree zeroed (this block's share); ahead: the next step's X into x, then sX."""
    t = cuda.threadIdx.x
    B, hidden = Z.shape
    K = W1.shape[0]
    C = old[0].shape[1]
    ntiles = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ)
    r = cuda.blockIdx.x
    while r < B:                                 # block r zeroes row r
        j = t
        while j < hidden:
            Zfree[r, j] = float32(0.0)
            j += cuda.blockDim.x
        r += cuda.gridDim.x
    stamp(T, i, 10)
    stage_w2(old[0], old[1], old[2], sP)
    stamp(T, i, 11)
    softmax_rows(Z, y, perm, step * B, old[1], C, sP, losses, step, scr, True, T, i)
    stamp(T, i, 5)
    if ahead:                                    # the next step's X: in flight during the updates
        load_x(X, perm, (step + 1) * B, B, origin[0], t // 32, x)
    update_units(lr, Z, old[1], C, new[0], new[1], new[2], sP, scr)
    stamp(T, i, 6)
    tile = cuda.blockIdx.x
    k0, j0 = origin
    while tile < ntiles:
        if tile >= cuda.gridDim.x:               # a second tile: the sums of dW1 overwrote dZ2 and W2 in sP
            stage_w2(old[0], old[1], old[2], sP)
            softmax_rows(Z, y, perm, step * B, old[1], C, sP, losses, step, scr, False, T, i)
        stage_dh(Z, old[1], C, j0, sP, sdH)
        if not kept:
            stage_x(X, perm, step * B, B, k0, sX, x)
            stage_w(W1, k0, j0, sW)
        cuda.syncthreads()
        stamp(T, i, 7)
        tile_grads(sX, sdH, sP)
        stamp(T, i, 8)
        if ahead:
            store_x(sX, t // 32, x)
        update_tile(lr, W1, k0, j0, sW, sP)
        stamp(T, i, 9)
        tile += cuda.gridDim.x
        k0, j0 = tile_origin(tile, hidden)


@cuda.jit(device=True)
def publish(new, params, Zlast):
    """After the last step: the copies `new` = (W2, b1, b2) into the parameters, Zlast zeroed (this block's share)."""
    t = cuda.threadIdx.x
    hidden, C = params[0].shape
    j = cuda.blockIdx.x
    while j < hidden:
        if t < C:
            params[0][j, t] = new[0][j, t]
        if t == C:
            params[1][j] = new[1][j]
        j += cuda.gridDim.x
    if cuda.blockIdx.x == 0 and t < C:
        params[2][t] = new[2][t]
    B = Zlast.shape[0]
    v = cuda.blockIdx.x * cuda.blockDim.x + t
    while v < B * hidden:
        Zlast[v // hidden, v % hidden] = float32(0.0)
        v += cuda.gridDim.x * cuda.blockDim.x


@cuda.jit(**_JIT)
def one_barrier_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, Wb, b1b, b2b, Zb, losses, T):
    """Steps step0 .. step0 + nsteps - 1 in ONE cooperative launch, one grid barrier per step."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    scr = cuda.shared.array(SCR_CELLS, float32)
    x = cuda.local.array(16, float32)
    grid = cuda.cg.this_grid()
    B = Zb.shape[1]
    K, hidden = W1.shape
    kept = ((K + TK - 1) // TK) * ((hidden + TJ - 1) // TJ) <= cuda.gridDim.x
    ahead = kept and 4 * (cuda.blockDim.x // 32) >= B
    origin = tile_origin(cuda.blockIdx.x, hidden)
    for i in range(nsteps):
        step = step0 + i
        stamp(T, i, 0)
        forward(X, perm, step * B, W1, Zb[i % 3], sX, sW, sP, x, origin, not kept or i == 0, not ahead or i == 0,
                T, i)
        stamp(T, i, 3)
        grid.sync()                              # Zb[i % 3] is complete
        stamp(T, i, 4)
        if i == 0:
            old = (W2, b1, b2)
        else:
            old = (Wb[i % 2], b1b[i % 2], b2b[i % 2])
        new = (Wb[(i + 1) % 2], b1b[(i + 1) % 2], b2b[(i + 1) % 2])
        backward_update(X, y, perm, step, lr, W1, Zb[i % 3], Zb[(i + 2) % 3], old, new, losses, sX, sW, sP, sdH,
                        scr, x, origin, kept, ahead and i + 1 < nsteps, T, i)
    grid.sync()
    n = nsteps % 2
    publish((Wb[n], b1b[n], b2b[n]), (W2, b1, b2), Zb[(nsteps + 2) % 3])


@cuda.jit(**_JIT)
def forward_kernel(X, perm, step, W1, Zb, T):
    """Phase A of step `step` as its own launch, into Zb[0]."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    x = cuda.local.array(16, float32)
    forward(X, perm, step * Zb.shape[1], W1, Zb[0], sX, sW, sP, x, tile_origin(cuda.blockIdx.x, W1.shape[1]),
            True, True, T, 0)


@cuda.jit(**_JIT)
def update_kernel(X, y, perm, step, lr, W1, b1, W2, b2, Wb, b1b, b2b, Zb, losses, T):
    """Everything after the barrier of step `step` as its own launch: reads the parameters, writes copy 1."""
    sX = cuda.shared.array(X_CELLS, float32)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)
    sdH = cuda.shared.array(DH_CELLS, float32)
    scr = cuda.shared.array(SCR_CELLS, float32)
    x = cuda.local.array(16, float32)
    backward_update(X, y, perm, step, lr, W1, Zb[0], Zb[2], (W2, b1, b2), (Wb[1], b1b[1], b2b[1]), losses, sX, sW,
                    sP, sdH, scr, x, tile_origin(cuda.blockIdx.x, W1.shape[1]), False, False, T, 0)


@cuda.jit(**_JIT)
def publish_kernel(W2, b1, b2, Wb, b1b, b2b, Zb):
    """Copy 1 into the parameters, Zb[0] zeroed."""
    publish((Wb[1], b1b[1], b2b[1]), (W2, b1, b2), Zb[0])


class FusedTrainer:
    """SGD on the MLP with the one-barrier kernel: modes "phases" (3 launches a step), "step", "epoch"."""

    def __init__(self, params, batch_size, lr, mode="epoch", threads=None, blocks=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        W1, b1, W2, b2 = (params[k] for k in ("W1", "b1", "W2", "b2"))
        K, hidden = W1.shape
        C = W2.shape[1]
        if not (1 <= C < NC_PAD and 1 <= batch_size <= MAX_BATCH and hidden * (NC_PAD + 1) <= P_CELLS - W2_0):
            raise ValueError("sizes")
        threads = threads or course.pick(gpu=THREADS, sim=64)
        if threads % 64 or not 64 <= threads <= 512:
            raise ValueError(f"threads must be a multiple of 64 in [64, 512], got {threads}")
        if course.SIMULATOR and mode != "phases" and blocks not in (None, 1):
            raise ValueError("the simulator's grid barrier works with one block only: blocks=1")
        self.params, self.lr, self.mode, self.threads = params, np.float32(lr), mode, threads
        self.W = (W1, b1, W2, b2)
        f32 = np.float32
        self.Zb = cuda.to_device(np.zeros((3, batch_size, hidden), f32))
        self.Wb = cuda.device_array((2, hidden, C), f32)
        self.b1b = cuda.device_array((2, hidden), f32)
        self.b2b = cuda.device_array((2, C), f32)
        self.no_clocks = cuda.device_array((0, 1, NPOINTS), np.uint64)
        self.ntiles = cdiv(K, TK) * cdiv(hidden, TJ)
        self._blocks = blocks
        self.batch_size = batch_size

    def grid(self, args):
        if self._blocks:
            return self._blocks
        if course.SIMULATOR:
            return 1
        argtypes = tuple(one_barrier_kernel.typeof_pyval(a) for a in args)
        kernel = one_barrier_kernel.compile(argtypes)
        self._blocks = min(max(self.ntiles, self.W[0].shape[1] + 1),
                           kernel.max_cooperative_grid_blocks(self.threads))
        return self._blocks

    def _args(self, X_d, y_d, perm_d, step0, nsteps, losses, T):
        return (X_d, y_d, perm_d, step0, nsteps, self.lr, *self.W, self.Wb, self.b1b, self.b2b, self.Zb, losses, T)

    def launch_phases(self, X_d, y_d, perm_d, step, losses, stream=0):
        W1, b1, W2, b2 = self.W
        g = self._blocks or max(self.ntiles, W1.shape[1] + 1)
        nt, T = self.threads, self.no_clocks
        forward_kernel[g, nt, stream](X_d, perm_d, step, W1, self.Zb, T)
        update_kernel[g, nt, stream](X_d, y_d, perm_d, step, self.lr, W1, b1, W2, b2, self.Wb, self.b1b, self.b2b,
                                     self.Zb, losses, T)
        publish_kernel[g, nt, stream](W2, b1, b2, self.Wb, self.b1b, self.b2b, self.Zb)

    def launch_step(self, X_d, y_d, idx, loss, stream=0):
        if self.mode == "phases":
            self.launch_phases(X_d, y_d, idx, 0, loss, stream)
        else:
            args = self._args(X_d, y_d, idx, 0, 1, loss, self.no_clocks)
            one_barrier_kernel[self.grid(args), self.threads, stream](*args)

    def epoch(self, X_d, y_d, perm_d, losses, clocks=None):
        B = self.batch_size
        nsteps = perm_d.shape[0] // B
        require("losses", losses, np.float32, shape=(nsteps,))
        zero_kernel[cdiv(nsteps, 256), 256](losses)
        if self.mode == "phases":
            for step in range(nsteps):
                self.launch_phases(X_d, y_d, perm_d, step, losses)
            return losses
        T = self.no_clocks if clocks is None else clocks
        chunks = [(s, 1) for s in range(nsteps)] if self.mode == "step" else [(0, nsteps)]
        for step0, n in chunks:
            args = self._args(X_d, y_d, perm_d, step0, n, losses, T)
            one_barrier_kernel[self.grid(args), self.threads](*args)
        return losses

    def timed_epoch(self, X_d, y_d, perm_d, losses):
        args = self._args(X_d, y_d, perm_d, 0, perm_d.shape[0] // self.batch_size, losses, self.no_clocks)
        T = cuda.to_device(np.zeros((perm_d.shape[0] // self.batch_size, self.grid(args), NPOINTS), np.uint64))
        self.epoch(X_d, y_d, perm_d, losses, clocks=T)
        return T.copy_to_host().astype(np.int64)
