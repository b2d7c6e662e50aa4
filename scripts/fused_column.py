"""EXPERIMENT (issue 13), not adopted: course.fused with ONE grid barrier per step, and no phase B. It checks
against the NumPy twin (and the simulator, on one tile) but ran 13.6 ms an epoch on the H200 against 12.1 for
course.fused (results/fused-h200.json, "tried, not adopted").

Every block owns one tile of W1 (128 blocks for 784-128) and keeps its own copy of its column's small layer (W2's
rows of its 8 hidden units, their b1, and b2) in shared memory. A step:
- phase A as course.fused's (with the copy engine); then the block counts in for its column of tiles (an atomic
  with acquire and release semantics, count_in), and the LAST of the column's 8 blocks (Z[:, column] is then
  complete) makes H[:, column] = ReLU(Z + b1) and the column's share of the logits, added atomically into L;
- one grid barrier: the logits are complete;
- every block by itself: the softmax and dZ2 of all 64 rows (from L: 640 floats), its column of dH, its copy of
  the small layer (every block of a column computes the same), and its tile of W1 (course.fused's phase C).
L has three buffers (step i adds into L[i % 3]; block 0 zeroes L[(i + 2) % 3] after the barrier: read last before
it, added into next after the next one). The clocks (COLUMN_PARTS) show where it loses: the softmax, the column's
dH and the small layer take 2.3, 1.9 and 2.0 us a step in every block, more than phase B and the second barrier
they replace; the next try would move the small layer to the 4 blocks without a tile (W2, b1, b2 double-buffered
in memory), so that only the softmax and dH stay on the path."""
import math

import numpy as np
from numba import cuda, float32, int32, types, uint64

import course
from course.fused import (CLOCK_PARTS, DH_CELLS, MAX_BATCH, NC_PAD, P_CELLS, TJ, TK, W_CELLS, X_ALIGN, X_CELLS,
                          FusedTrainer, add_partials, copy_x, forward_partials, grid_barrier, halve, shfl_xor,
                          has_copy_engine,
                          stage_w, stage_x, stamp, start_copies, tile_grads, tile_origin, update_tile, wait_x,
                          _JIT, sgd_epoch_ref)  # noqa: F401  (sgd_epoch_ref, CLOCK_PARTS: for the tests)
from course.util import cdiv

if course.SIMULATOR:
    def count_in(cnt, j):
        """cnt[j] += 1, atomically; returns the count before."""
        return cuda.atomic.add(cnt, j, uint64(1))

    def prefetch_tile(Xt, row, nbytes):
        """The simulator has no cache: nothing to do."""
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from course.fused import _item, _ptx, has_copy_engine

    @intrinsic
    def count_in(typingctx, cnt, j):
        """cnt[j] += 1 (uint64), atomically, with acquire and release semantics at GPU scope: what the block wrote
        before its barrier is visible to the thread that later counts in, and what the threads counted in before
        wrote is visible to this one. Returns the count before (PTX atom.add.acq_rel.gpu)."""
        def codegen(context, builder, sig, args):
            return _ptx(builder, "atom.add.acq_rel.gpu.u64 $0, [$1], 1;", "=l,l,~{memory}",
                        [_item(context, builder, sig, args, 0, 1)], ir.IntType(64))
        return types.uint64(cnt, j), codegen

    @intrinsic
    def prefetch_tile(typingctx, Xt, row, nbytes):
        """Ask the L2 cache for nbytes from Xt[row, 0] on, in one instruction (PTX cp.async.bulk.prefetch.L2)."""
        def codegen(context, builder, sig, args):
            if has_copy_engine():
                _ptx(builder, "{ .reg .u64 g; cvta.to.global.u64 g, $0; cp.async.bulk.prefetch.L2.global [g], $1; }",
                     "l,r", [_item(context, builder, sig, args, 0, 1),
                             context.cast(builder, args[2], sig.args[2], types.uint32)])
            return context.get_dummy_value()
        return types.void(Xt, row, nbytes), codegen


S_W2 = 0                     # the small layer of a block's column of tiles, its own copy in shared memory sS:
S_B1 = TJ * NC_PAD           # W2[j0:j0 + TJ, :] (TJ x NC_PAD, zeros past C), b1[j0:j0 + TJ], b2 (NC_PAD)
S_B2 = S_B1 + TJ
S_CELLS = S_B2 + NC_PAD


@cuda.jit(device=True)
def load_small(W2, b1, b2, j0, sS):
    """sS := the rows j0 .. j0 + TJ - 1 of W2 and b1, and b2 (zeros past the edges)."""
    hidden, C = W2.shape
    v = cuda.threadIdx.x
    while v < S_CELLS:
        x = float32(0.0)
        if v < S_B1:
            jj = v // NC_PAD
            c = v - jj * NC_PAD
            if j0 + jj < hidden and c < C:
                x = W2[j0 + jj, c]
        elif v < S_B2:
            if j0 + v - S_B1 < hidden:
                x = b1[j0 + v - S_B1]
        elif v - S_B2 < C:
            x = b2[v - S_B2]
        sS[v] = x
        v += cuda.blockDim.x
    cuda.syncthreads()


@cuda.jit(device=True)
def last_in_column(cnt, jt, ktiles, sFlag):
    """After the block's atomics into Z, thread 0 counts it in for its column of tiles jt (count_in); True, in
    every thread of the block, when it came last of the column's ktiles blocks: Z[:, column] is then complete."""
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        sFlag[0] = 1 if (count_in(cnt, jt) + uint64(1)) % uint64(ktiles) == uint64(0) else 0
    cuda.syncthreads()
    return sFlag[0] == 1


@cuda.jit(device=True)
def column_logits(Z, j0, H, L, sS, scr):
    """The last block of a column (Z[:, j0:j0 + TJ] complete): thread (r, jj) sets H[r, j0 + jj] = ReLU(Z + b1)
    (and Z to zero again) and makes its share of row r's logits, H[r, j] W2[j, :]; the TJ = 8 threads of a row add
    their shares in 8 + 4 + 2 shuffles (unit jj's lane keeps classes 2 jj and 2 jj + 1), then into L, atomically.
    Every thread of the block must call it."""
    B, hidden = H.shape
    C = L.shape[1]
    acc = cuda.local.array(NC_PAD, float32)
    v = cuda.threadIdx.x
    while v < MAX_BATCH * TJ:
        r = v // TJ
        jj = v - r * TJ
        h = float32(0.0)
        if r < B and j0 + jj < hidden:
            h = max(Z[r, j0 + jj] + sS[S_B1 + jj], float32(0.0))
            H[r, j0 + jj] = h
            Z[r, j0 + jj] = float32(0.0)
        for c in range(NC_PAD):
            acc[c] = h * sS[S_W2 + jj * NC_PAD + c]
        halve(acc, 8, 4, scr)
        halve(acc, 4, 2, scr)
        halve(acc, 2, 1, scr)
        for q in range(2):
            if r < B and 2 * jj + q < C:
                cuda.atomic.add(L, (r, 2 * jj + q), acc[q])
        v += cuda.blockDim.x


@cuda.jit(device=True)
def load_column_h(H, j0, hv):
    """hv[q] = H[r, j0 + jj] for the cells v = t + q blockDim = r TJ + jj (zeros past the edges): in flight while
    the softmax runs."""
    B, hidden = H.shape
    for q in range(8):                           # constant length: MAX_BATCH TJ / 64 threads at most
        v = cuda.threadIdx.x + q * cuda.blockDim.x
        r = v // TJ
        jj = v - r * TJ
        ok = v < MAX_BATCH * TJ and r < B and j0 + jj < hidden
        hv[q] = H[min(r, B - 1), min(j0 + jj, hidden - 1)] if ok else float32(0.0)


@cuda.jit(device=True)
def softmax_rows(L, sLab, sS, sD, losses, step, scr):
    """dZ2 of the batch from its logits L (B x C, complete) and b2, half a warp per row (class c = lane % 16), two
    rows per thread at a time: sD[r, c] = (softmax - onehot) / B, zeros past C and B; block 0 adds each row's loss
    / B into losses[step]. Every thread of the block must call it."""
    B, C = L.shape
    t = cuda.threadIdx.x
    c = t % NC_PAD
    rows = cuda.blockDim.x // NC_PAD             # rows per pass
    z = cuda.local.array(2, float32)
    r0 = t // NC_PAD
    while r0 - t // NC_PAD < MAX_BATCH:          # the same trips in every thread
        for q in range(2):                       # both loads in flight
            r = r0 + q * rows
            z[q] = L[min(r, B - 1), min(c, C - 1)] + sS[S_B2 + c] if r < B and c < C else float32(-3.0e38)
        for q in range(2):
            r = r0 + q * rows
            m = z[q]
            for mask in (1, 2, 4, 8):
                m = max(m, shfl_xor(scr, m, mask))
            e = math.exp(z[q] - m) if r < B and c < C else float32(0.0)
            s = e
            for mask in (1, 2, 4, 8):
                s += shfl_xor(scr, s, mask)
            label = sLab[r] if r < B else -1
            if r < MAX_BATCH:
                sD[r * NC_PAD + c] = (e / s - (float32(1.0) if c == label else float32(0.0))) / float32(B) \
                    if r < B and c < C else float32(0.0)
            if cuda.blockIdx.x == 0 and c == label:
                cuda.atomic.add(losses, step, (math.log(s) - (z[q] - m)) / float32(B))
        r0 += 2 * rows
    cuda.syncthreads()


@cuda.jit(device=True)
def column_grads(hv, sD, sS, sH, sdH):
    """Thread (r, jj) (hv: its cells of H, load_column_h): sH[r, jj] = H[r, j0 + jj] and sdH[r, jj] =
    (dZ2[r] W2[j0 + jj]^T) [H > 0]: this column of H and dH, from dZ2 (sD) and the block's copy of W2."""
    for q in range(8):
        v = cuda.threadIdx.x + q * cuda.blockDim.x
        if v < MAX_BATCH * TJ:
            r = v // TJ
            jj = v - r * TJ
            g = float32(0.0)
            for c in range(NC_PAD):
                g += sD[r * NC_PAD + c] * sS[S_W2 + jj * NC_PAD + c]
            sH[v] = hv[q]
            sdH[v] = g if hv[q] > float32(0.0) else float32(0.0)
    cuda.syncthreads()


@cuda.jit(device=True)
def update_column_small(lr, sD, sH, sdH, sS, W2, b1, b2, j0, k0, scr):
    """The small layer of this column in the block's copy sS, the same in every block of the column. Slot s of sS
    (W2[j0 + jj, c] for s = jj NC_PAD + c, then b1[j0 + jj], then b2[c]) -= lr times its batch sum: sum_r H[r, jj]
    dZ2[r, c], sum_r dH[r, jj], sum_r dZ2[r, c]; two threads per slot, 32 rows each, four at a time, and a shuffle.
    The block of the column's first tile (k0 = 0) writes W2 and b1 to memory too, block 0 b2. Every thread of the
    block must call it."""
    hidden, C = W2.shape
    t = cuda.threadIdx.x
    s0 = 0
    while s0 < S_CELLS:                          # the same trips in every thread
        v = s0 + t // 2                          # this thread's slot
        half = t % 2                             # rows 32 half .. 32 half + 31
        jj = v // NC_PAD if v < S_B1 else v - S_B1
        c = v % NC_PAD if v < S_B1 else v - S_B2
        a0 = float32(0.0)
        a1 = float32(0.0)
        a2 = float32(0.0)
        a3 = float32(0.0)
        if v < S_B1 and c < C:
            for r in range(0, MAX_BATCH // 2, 4):
                o = half * (MAX_BATCH // 2) + r
                a0 += sH[o * TJ + jj] * sD[o * NC_PAD + c]
                a1 += sH[(o + 1) * TJ + jj] * sD[(o + 1) * NC_PAD + c]
                a2 += sH[(o + 2) * TJ + jj] * sD[(o + 2) * NC_PAD + c]
                a3 += sH[(o + 3) * TJ + jj] * sD[(o + 3) * NC_PAD + c]
        elif S_B1 <= v < S_B2:
            for r in range(0, MAX_BATCH // 2, 4):
                o = half * (MAX_BATCH // 2) + r
                a0 += sdH[o * TJ + jj]
                a1 += sdH[(o + 1) * TJ + jj]
                a2 += sdH[(o + 2) * TJ + jj]
                a3 += sdH[(o + 3) * TJ + jj]
        elif S_B2 <= v < S_CELLS and c < C:
            for r in range(0, MAX_BATCH // 2, 4):
                o = half * (MAX_BATCH // 2) + r
                a0 += sD[o * NC_PAD + c]
                a1 += sD[(o + 1) * NC_PAD + c]
                a2 += sD[(o + 2) * NC_PAD + c]
                a3 += sD[(o + 3) * NC_PAD + c]
        g = (a0 + a1) + (a2 + a3)
        g += shfl_xor(scr, g, 1)                 # the other half's rows
        if half == 0 and v < S_CELLS and (v < S_B1 and c < C or S_B1 <= v < S_B2 or v >= S_B2 and c < C):
            w = sS[v] - lr * g
            sS[v] = w
            if v < S_B1 and k0 == 0 and j0 + jj < hidden:
                W2[j0 + jj, c] = w
            elif S_B1 <= v < S_B2 and k0 == 0 and j0 + jj < hidden:
                b1[j0 + jj] = w
            elif v >= S_B2 and cuda.blockIdx.x == 0:
                b2[c] = w
        s0 += cuda.blockDim.x // 2
    cuda.syncthreads()


@cuda.jit(device=True)
def zero_rows(L):
    """L[:, :] = 0 (at most NC_PAD columns), by the threads of one block."""
    r = cuda.threadIdx.x // NC_PAD
    c = cuda.threadIdx.x % NC_PAD
    while r < L.shape[0]:
        if c < L.shape[1]:
            L[r, c] = float32(0.0)
        r += cuda.blockDim.x // NC_PAD


@cuda.jit(**_JIT)
def fused_column_kernel(X, y, perm, step0, nsteps, lr, W1, b1, W2, b2, Z, H, L, cnt, losses, T, bar, Xt):
    """Steps step0 .. step0 + nsteps - 1 in ONE cooperative launch with ONE grid barrier a step. Every block owns
    one tile (gridDim >= tiles) and keeps, besides it, its own copy of its column's small layer (sS).
    Phase A: X W1[tile] into Z, atomically, as before; then the block counts in for its column, and the last of the
    column's blocks makes H[:, column] and the column's share of the logits, into L[i % 3], atomically.
    -- grid barrier: the logits are complete --
    Then each block, by itself: the softmax of every row (dZ2, in shared memory), its column of dH, its copy of
    W2, b1, b2 updated, and its tile of W1 (phase C). L: three (B, C) buffers, zero at the start (block 0 zeroes
    each two steps after its use); cnt: a count per column (uint64, multiples of the tiles per column); Xt: as in
    fused_steps_kernel. T: the clocks (see COLUMN_PARTS)."""
    sX = cuda.shared.array(X_CELLS, float32, alignment=X_ALIGN)
    mbar = cuda.shared.array(1, uint64)
    sW = cuda.shared.array(W_CELLS, float32)
    sP = cuda.shared.array(P_CELLS, float32)     # partial sums; dZ2 and this column of H
    sdH = cuda.shared.array(DH_CELLS, float32)
    sS = cuda.shared.array(S_CELLS, float32)
    sLab = cuda.shared.array(MAX_BATCH, int32)   # the batch's labels
    sFlag = cuda.shared.array(1, int32)
    sD = sP[:MAX_BATCH * NC_PAD]                 # dZ2 (MAX_BATCH x NC_PAD)
    sH = sP[MAX_BATCH * NC_PAD:MAX_BATCH * (NC_PAD + TJ)]   # H[:, column] (MAX_BATCH x TJ)
    scr = sP[P_CELLS - 512:]                     # the simulator's shuffles
    hv = cuda.local.array(8, float32)
    grid = cuda.cg.this_grid()
    t = cuda.threadIdx.x
    B = H.shape[0]
    K, hidden = W1.shape
    ktiles = (K + TK - 1) // TK
    mine = cuda.blockIdx.x < ktiles * ((hidden + TJ - 1) // TJ)   # blocks past the tiles only pass the barriers
    k0, j0 = tile_origin(cuda.blockIdx.x, hidden)
    xrow = (k0 // TK) * perm.shape[0]            # tile k0's rows in Xt
    copies = Xt.shape[0] > 0 and mine
    if mine:
        load_small(W2, b1, b2, j0, sS)
        stage_w(W1, k0, j0, sW)
        if copies:
            start_copies(Xt, xrow + step0 * B, B, sX, mbar)
    for i in range(nsteps):
        step = step0 + i
        base = step * B
        stamp(T, i, 0)
        if mine:
            if copies and i + 1 < nsteps and t == 0:
                prefetch_tile(Xt, xrow + base + B, B * TK * 4)      # the next batch's tile, into L2
            lab = y[perm[base + t]] if t < B else 0
            if copies:
                wait_x(mbar, i % 2)
            else:
                stage_x(X, perm, base, B, k0, sX)
            cuda.syncthreads()
            stamp(T, i, 6)
            forward_partials(sX, sW, sP)
            stamp(T, i, 7)
            add_partials(sP, B, j0, Z)
            if t < B:
                sLab[t] = lab
            stamp(T, i, 8)
            if last_in_column(cnt, j0 // TJ, ktiles, sFlag):
                stamp(T, i, 10)
                column_logits(Z, j0, H, L[i % 3], sS, scr)
        stamp(T, i, 1)
        grid_barrier(grid, bar)                  # the logits are complete
        stamp(T, i, 2)
        if mine:
            if cuda.blockIdx.x == 0:
                zero_rows(L[(i + 2) % 3])        # last read before this barrier, next written after the next one
            load_column_h(H, j0, hv)
            softmax_rows(L[i % 3], sLab, sS, sD, losses, step, scr)
            stamp(T, i, 9)
            column_grads(hv, sD, sS, sH, sdH)
            stamp(T, i, 11)
            update_column_small(lr, sD, sH, sdH, sS, W2, b1, b2, j0, k0, scr)
            stamp(T, i, 12)
            tile_grads(sX, sdH, sP)
            stamp(T, i, 15)
            if copies and i + 1 < nsteps:
                copy_x(Xt, xrow + base + B, B, sX, mbar)
            stamp(T, i, 13)
            update_tile(lr, W1, k0, j0, sW, sP)
            stamp(T, i, 14)
    grid_barrier(grid, bar)                      # every block has read the last logits
    if cuda.blockIdx.x == 0:
        zero_rows(L[(nsteps - 1) % 3])


COLUMN_PARTS = {   # course.fused.CLOCK_PARTS for fused_column_kernel
    "A: X[batch, tile] into shared memory": (0, 6, "tiles"),
    "A: the partial sums X W1": (6, 7, "tiles"),
    "A: added into Z (atomics)": (7, 8, "tiles"),
    "A: counted in (the column's last block: H and its share of the logits)": (8, 1, "tiles"),
    "barrier (last arrival to first release)": (1, 2, "barrier"),
    "C: softmax and dZ2 of every row": (2, 9, "tiles"),
    "C: the column's dH": (9, 11, "tiles"),
    "C: the column's W2, b1, b2": (11, 12, "tiles"),
    "C: the sums dW1 = X^T dH": (12, 15, "tiles"),
    "C: the next batch's X[batch, tile] asked of the copy engine": (15, 13, "tiles"),
    "C: W1 updated": (13, 14, "tiles"),
}




@cuda.jit
def tile_rows_kernel(X, perm, Xt):
    """Xt[kt n + i, kk] = X[perm[i], kt TK + kk], zeros past the inputs (n = len(perm)): for each tile of inputs
    kt, the epoch's rows of X in batch order, one after another, so that a batch's tile is ONE run of memory.
    A block per row of Xt, a thread per input: one division per block."""
    n, K = perm.shape[0], X.shape[1]
    r, kk = cuda.blockIdx.x, cuda.threadIdx.x    # the row of Xt: tile kt, batch row i of the epoch
    kt = r // n
    k = kt * TK + kk
    if r < Xt.shape[0] and kk < TK:
        Xt[r, kk] = X[perm[r - kt * n], min(k, K - 1)] if k < K else float32(0.0)


class ColumnTrainer(FusedTrainer):
    """course.fused.FusedTrainer with fused_column_kernel (mode "epoch" only: one launch per epoch, one barrier a
    step). It needs a block per tile: in the simulator, one tile (at most 100 inputs and 8 hidden units)."""

    def __init__(self, params, batch_size, lr, threads=None, blocks=None):
        super().__init__(params, batch_size, lr, mode="epoch", threads=threads, blocks=blocks)
        hidden, C = params["W2"].shape
        if course.SIMULATOR and self.ntiles > 1:
            raise ValueError(f"the simulator runs one block: one tile, not {self.ntiles}")
        self.L = cuda.to_device(np.zeros((3, batch_size, C), np.float32))     # the logits, three buffers, zero
        self.cnt = cuda.to_device(np.zeros(cdiv(hidden, TJ), np.uint64))     # a count per column of tiles

    @property
    def kernel(self):
        return fused_column_kernel

    @property
    def clock_parts(self):
        return COLUMN_PARTS

    def _args(self, X_d, y_d, perm_d, step0, nsteps, losses, T, Xt=None):
        return (X_d, y_d, perm_d, step0, nsteps, self.lr, *self.W, self.Z, self.H, self.L, self.cnt, losses, T,
                self.bar, self.no_tiles if Xt is None else Xt)

    def x_tiles(self, X_d, perm_d, grid, nsteps):
        """X's tiles in the epoch's batch order, for the copy engine (fused_column_kernel's Xt: cdiv(K, TK) x
        len(perm) rows of TK floats, 192 MB for MNIST), laid out by one launch (course.fused gathers two batches'
        tiles inside its kernel instead); no rows where the GPU has no copy engine."""
        if not has_copy_engine():
            return self.no_tiles
        shape = (cdiv(X_d.shape[1], TK) * perm_d.shape[0], TK)
        if self.Xt is None or self.Xt.shape != shape:
            self.Xt = cuda.device_array(shape, np.float32)
        tile_rows_kernel[shape[0], cdiv(TK, 32) * 32](X_d, perm_d, self.Xt)
        return self.Xt

    def grid(self, args):
        """A block per tile, and no more."""
        if course.SIMULATOR:
            return 1
        kernel = fused_column_kernel.compile(tuple(fused_column_kernel.typeof_pyval(a) for a in args))
        fit = kernel.max_cooperative_grid_blocks(self.threads)
        if fit < self.ntiles:
            raise ValueError(f"fused_column_kernel needs a block per tile, {self.ntiles}; {fit} fit on this GPU")
        return self.ntiles
