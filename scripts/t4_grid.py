"""course.fused on this GPU as a T4 would run it: the TMA (the per-SM bulk-copy unit, PTX cp.async.bulk) off, as below sm_90, and
the cooperative grid capped at what a T4 co-schedules. Every mode checked against the NumPy twin (20 steps, full
size), ms per epoch of each mode, test accuracy after 3 epochs against the plain loop. An H200 limited to a T4's
grid, NOT a T4 measurement: a T4 has fewer, slower SMs and 320 GB/s of memory, so its epochs are slower; what this
shows is that the kernels are correct, and how much slower they get, with a T4's grid and without the TMA.

The T4's grid: 40 SMs x the blocks of the kernel one SM holds within a T4's limits per SM (64 KB of shared memory,
1,024 threads, 64K registers, 16 blocks), from the kernel's registers and shared memory per block as ptxas reports
them for sm_75 (course/tools/compile.py; the kernel's own attributes on this GPU where there is no ptxas).

Usage: COURSE_DEVICE=gpu python scripts/t4_grid.py [--out=notebooks/results/fused-t4grid-<gpu>.json] [--quick]
  --quick: no 3-epoch accuracy run.
The knobs it reaches from outside (course/fused.py is exported from notebooks 11 and 12): course.fused.has_tma,
replaced before anything compiles (its intrinsics ask it while generating code; FusedTrainer asks it for
`copies`), and FusedTrainer's `blocks` argument (the grid of the cooperative modes)."""
import json
import sys
import time
from datetime import date

import numpy as np

import course  # noqa: F401  (first: it picks the GPU or the simulator)
import course.fused as fused

fused.has_tma = lambda: False    # before anything compiles: the TMA path off, as on every GPU below sm_90

from numba import cuda  # noqa: E402

from course.data import load_mnist  # noqa: E402
from course.tools import compile as ccompile  # noqa: E402
from course.tools.signatures import all_signatures  # noqa: E402
from course.train import fit, init_params  # noqa: E402

T4 = dict(name="Tesla T4", cc=(7, 5), sms=40, shared_per_sm=64 * 1024, threads_per_sm=1024, regs_per_sm=64 * 1024,
          blocks_per_sm=16)             # NVIDIA's Turing tuning guide and CUDA's occupancy table for 7.5
REG_UNIT = 256                          # registers are given to a warp in units of 256 (compute capability 7.5)
WARP = 32
B, HIDDEN, LR, CHECK_STEPS, EPOCHS, REPEATS = 64, 128, 0.1, 20, 3, 5
TOL = 1e-4                              # float32 sums in another order than the twin (lanes, atomics)
OUT = "notebooks/results/fused-t4grid-{card}.json"   # {card}: h100, h200, ... (the GPU it ran on)


def card(name):
    """A GPU's short name for a results file: h100, h200, or its name in lower case with dashes."""
    return next((c.lower() for c in ("H100", "H200") if c in name), "-".join(name.lower().split()))


def sm75_resources():
    """Registers and shared memory per block of fused_steps_kernel as ptxas assembles it for sm_75 (TMA
    off, max_registers as the kernel asks), or the compiled kernel's attributes on this GPU without ptxas."""
    names = ccompile.namespace()             # numba's types and the kernels' namedtuple types (Batch, Steps, ...)
    sig = all_signatures()["course.fused:fused_steps_kernel"][0]
    ptxas = ccompile.find_ptxas()
    if ptxas is None:
        return None
    from course.runtime.device import lower_kernel
    ptx = lower_kernel(fused.fused_steps_kernel.py_func, eval(f"({sig},)", {}, names), ccompile.CC)(T4["cc"])
    res = ccompile.ptxas_resources(ptx, T4["cc"], fused.REGS, ptxas)
    return dict(res, source=f"ptxas {ptxas} -arch=sm_75 -maxrregcount={fused.REGS}")


def own_resources(trainer, args):
    """The fallback: registers and shared memory of the kernel compiled for this GPU."""
    k = trainer.typed[fused.fused_steps_kernel].compiled(args)
    return dict(registers=k.get_regs_per_thread(), shared=k.get_shared_mem_per_block(), spills=None,
                source="the kernel compiled for this GPU (no ptxas found)")


def blocks_per_sm(registers, shared, threads):
    """Blocks of `threads` threads a T4's SM holds at once (CUDA's occupancy rules for compute capability 7.5)."""
    warps = -(-threads // WARP)
    regs_per_warp = -(-registers * WARP // REG_UNIT) * REG_UNIT
    limits = dict(blocks=T4["blocks_per_sm"], threads=T4["threads_per_sm"] // threads,
                  registers=T4["regs_per_sm"] // (regs_per_warp * warps),
                  shared=T4["shared_per_sm"] // shared if shared else T4["blocks_per_sm"])
    return min(limits.values()), limits


def check(mode, blocks, X_d, y_d, perm, X, y):
    """Max |loss - twin| and |param - twin| over CHECK_STEPS steps of one mode on `blocks` blocks."""
    want_losses, want = fused.sgd_epoch_ref(X, y, perm[:CHECK_STEPS * B], init_params(HIDDEN, 0).to_host(), B, LR)
    q = init_params(HIDDEN, 0)
    trainer = fused.FusedTrainer(q, B, LR, mode=mode, blocks=blocks)
    losses = trainer.epoch(X_d, y_d, cuda.to_device(perm[:CHECK_STEPS * B]),
                           cuda.device_array(CHECK_STEPS, np.float32)).copy_to_host()
    got = q.to_host()
    loss_err = float(np.max(np.abs(losses - want_losses)))
    param_err = max(float(np.max(np.abs(got[k] - want[k]))) for k in got)
    return dict(blocks=blocks, copies=trainer.copies, max_loss_err=loss_err, max_param_err=param_err,
                ok=loss_err < TOL and param_err < TOL)


def epoch_ms(mode, blocks, X_d, y_d, perm_d, repeats=REPEATS):
    """Median ms of `repeats` full epochs after a warm-up, by the host clock (as scripts/tune_fused.py)."""
    trainer = fused.FusedTrainer(init_params(HIDDEN, 0), B, LR, mode=mode, blocks=blocks)
    losses = cuda.device_array(perm_d.shape[0] // B, np.float32)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        trainer.epoch(X_d, y_d, perm_d, losses)
        cuda.synchronize()
        times.append(time.perf_counter() - t0)
    last = float(losses.copy_to_host()[-1])
    return round(float(np.median(times[1:])) * 1e3, 2), last, trainer


def main():
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    out = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--out=")), OUT.format(card=card(name)))
    X, y, Xt, yt = load_mnist()
    X_d, y_d = cuda.to_device(X), cuda.to_device(y)
    n = (len(X) // B) * B
    perm = np.random.default_rng(0).permutation(len(X))[:n]
    perm_d = cuda.to_device(perm)
    res = sm75_resources()
    probe = fused.FusedTrainer(init_params(HIDDEN, 0), B, LR, mode="epoch")
    if res is None:
        res = own_resources(probe, probe._args(X_d, y_d, perm_d, 0, 1, cuda.device_array(1, np.float32),
                                               probe.no_clocks))
    per_sm, limits = blocks_per_sm(res["registers"], res["shared"], probe.threads)
    grid = T4["sms"] * per_sm
    print(f"on {dev.name}: fused_steps_kernel for sm_75 ({res['source']}): {res['registers']} registers, "
          f"{res['shared']} bytes of shared memory per block, {res.get('spills')} bytes spilled; a T4's SM holds "
          f"{per_sm} block(s) of {probe.threads} threads (limits {limits}): grid {grid} blocks "
          f"({probe.ntiles} tiles: W1's tiles {'stay' if probe.ntiles <= grid else 'do not stay'} in shared memory)",
          flush=True)
    checks = {mode: check(mode, None if mode == "phases" else grid, X_d, y_d, perm, X, y) for mode in fused.MODES}
    for mode, c in checks.items():
        print(f"check {mode:6s} ({c['blocks'] or 'natural'} blocks, TMA {c['copies']}): max |loss - twin| "
              f"{c['max_loss_err']:.2e}, max |param - twin| {c['max_param_err']:.2e}  {'OK' if c['ok'] else 'WRONG'}",
              flush=True)
    times = {}
    for mode in fused.MODES:
        ms, last, _ = epoch_ms(mode, None if mode == "phases" else grid, X_d, y_d, perm_d,
                               repeats=REPEATS if mode == "epoch" else 2)
        times[mode] = dict(epoch_ms=ms, last_loss=round(last, 4))
        print(f"epoch {mode:6s}: {ms:8.2f} ms (last loss {last:.4f})", flush=True)
    full_ms, _, full = epoch_ms("epoch", None, X_d, y_d, perm_d)
    print(f"epoch on this GPU's own grid ({full._blocks} blocks), TMA off: {full_ms:.2f} ms", flush=True)
    acc = None
    if "--quick" not in sys.argv:
        f = fused.fit_fused(X, y, Xt, yt, epochs=EPOCHS, blocks=grid, progress=False)
        p = fit(X, y, Xt, yt, epochs=EPOCHS, progress=False)
        acc = dict(fused_t4_grid=round(f["epoch"][-1]["test_acc"], 4), plain=round(p["epoch"][-1]["test_acc"], 4),
                   fused_epoch_ms=[round(e["seconds"] * 1e3, 2) for e in f["epoch"]])
        print(f"accuracy after {EPOCHS} epochs: fused on the T4 grid {acc['fused_t4_grid']:.4f}, plain "
              f"{acc['plain']:.4f}", flush=True)
    result = dict(
        what=(f"H200 limited to a T4's grid, not a T4 measurement: course.fused (784-{HIDDEN}-10, batch {B}, SGD lr "
              f"{LR}, {n // B} steps an epoch) on an {dev.name} with the TMA off and the cooperative "
              f"grid capped at what a T4 co-schedules ({T4['sms']} SMs x {per_sm} block(s) of the kernel), by "
              f"scripts/t4_grid.py, {date.today().isoformat()}. check: {CHECK_STEPS} steps at full size against "
              f"the NumPy twin (course.fused.sgd_epoch_ref); epoch_ms: median of {REPEATS} epochs (2 for the "
              "phases and step modes) by the host clock; mode phases runs its natural grids (plain launches)."),
        device=str(dev.name), t4_limits={k: v for k, v in T4.items() if k != "cc"}, sm75_resources=res,
        blocks_per_sm=per_sm, occupancy_limits=limits, grid=grid, ntiles=probe.ntiles, threads=probe.threads,
        w1_tiles_kept=probe.ntiles <= grid, checks=checks, epochs=times,
        epoch_ms_own_grid_no_tma=dict(blocks=full._blocks, epoch_ms=full_ms), accuracy=acc)
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    print(f"wrote {out}")
    return 0 if all(c["ok"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
