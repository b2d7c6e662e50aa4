"""What one dependent step costs inside a numba-cuda kernel on this GPU (the fused step is a chain of them):
the SM clock (clock64 against %globaltimer), a global load that hits L2 (a pointer chase through 4 KB, every
thread of 132 blocks x 512 chasing), the same from DRAM (a 256 MB chase), a shared-memory load, __syncthreads with
512 threads, and a float atomic add whose result is used. Each: the median over blocks of (t1 - t0) / N.

Usage: python scripts/latency_probe.py   (GPU only)"""
import numpy as np
from llvmlite import ir
from numba import cuda, int32, types
from numba.cuda.extending import intrinsic

import course  # noqa: F401

N = 256


def _sreg(name):
    @intrinsic
    def read(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), f"mov.u64 $0, %{name};", "=l", side_effect=True)
            return builder.call(asm, [])
        return types.uint64(), codegen
    return read


globaltimer, clock64 = _sreg("globaltimer"), _sreg("clock64")


@cuda.jit
def chase(nxt, start, out, T):
    """Every thread follows nxt N times from its start; thread 0 records the time."""
    cuda.syncthreads()
    t0 = globaltimer()
    c0 = clock64()
    i = start[cuda.grid(1) % start.shape[0]]
    for _ in range(N):
        i = nxt[i]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        T[cuda.blockIdx.x, 0] = globaltimer() - t0
        T[cuda.blockIdx.x, 1] = clock64() - c0
    if i == -7:
        out[0] = i


@cuda.jit
def shared_chase(nxt, out, T):
    s = cuda.shared.array(1024, int32)
    for v in range(cuda.threadIdx.x, 1024, cuda.blockDim.x):
        s[v] = nxt[v]
    cuda.syncthreads()
    t0 = globaltimer()
    i = s[cuda.threadIdx.x]
    for _ in range(N):
        i = s[i]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        T[cuda.blockIdx.x, 0] = globaltimer() - t0
    if i == -7:
        out[0] = i


@cuda.jit
def barriers(out, T):
    cuda.syncthreads()
    t0 = globaltimer()
    for _ in range(N):
        cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        T[cuda.blockIdx.x, 0] = globaltimer() - t0


@cuda.jit
def atomics(acc, T):
    cuda.syncthreads()
    t0 = globaltimer()
    v = float(0.0)
    for _ in range(N):
        v = cuda.atomic.add(acc, cuda.threadIdx.x % 64, 1.0 + v * 0.0)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        T[cuda.blockIdx.x, 0] = globaltimer() - t0


def cycle(n, rng):
    """nxt: one random cycle through n cells."""
    order = rng.permutation(n)
    nxt = np.empty(n, np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def main():
    rng = np.random.default_rng(0)
    blocks, threads = cuda.get_current_device().MULTIPROCESSOR_COUNT, 512
    T = cuda.device_array((blocks, 2), np.uint64)
    out = cuda.device_array(1, np.int64)
    print("GPU:", cuda.get_current_device().name, f"({blocks} SMs), {blocks} blocks x {threads} threads")
    for name, n in (("global load, L2 hit (4 KB chase)", 512), ("global load, DRAM (256 MB chase)", 1 << 25)):
        nxt = cuda.to_device(cycle(n, rng))
        start = cuda.to_device(rng.integers(0, n, 4096).astype(np.int64))
        for _ in range(2):
            chase[blocks, threads](nxt, start, out, T)
        t = T.copy_to_host().astype(np.float64)
        print(f"{name:40s} {np.median(t[:, 0]) / N:7.1f} ns  ({np.median(t[:, 1]) / np.median(t[:, 0]):.2f} GHz SM clock)")
    s = cuda.to_device(cycle(1024, rng).astype(np.int32))
    for _ in range(2):
        shared_chase[blocks, threads](s, out, T)
    print(f"{'shared-memory load':40s} {np.median(T.copy_to_host()[:, 0].astype(float)) / N:7.1f} ns")
    for _ in range(2):
        barriers[blocks, threads](out, T)
    print(f"{'__syncthreads (512 threads)':40s} {np.median(T.copy_to_host()[:, 0].astype(float)) / N:7.1f} ns")
    acc = cuda.to_device(np.zeros(64, np.float32))
    for _ in range(2):
        atomics[blocks, threads](acc, T)
    print(f"{'atomic add, result used (64 addresses)':40s} {np.median(T.copy_to_host()[:, 0].astype(float)) / N:7.1f} ns")


if __name__ == "__main__":
    main()
