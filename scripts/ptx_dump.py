"""The PTX of course.fused's four kernels and course.merged's grid-stride SGD, every signature of the compile gate,
for a fake device of compute capability CC (no GPU needed), into OUTDIR: to compare two commits' kernels.

Usage: COURSE_DEVICE=gpu NUMBA_ENABLE_CUDASIM=0 PYTHONPATH=TREE python scripts/ptx_dump.py 9.0 OUTDIR
(TREE: the checkout whose course/ to compile, e.g. a `git worktree add /tmp/base REV`); then compare two OUTDIRs
with the mangled names taken out: diff <(sed 's/_ZN[0-9A-Za-z_]*//g' A/x.ptx) <(sed 's/_ZN[0-9A-Za-z_]*//g' B/x.ptx)"""
import importlib
import os
import sys

import numba.cuda
import numba.cuda.dispatcher as dispatcher

CC = tuple(int(c) for c in sys.argv[1].split("."))
KERNELS = ("course.fused:fused_steps_kernel", "course.fused:forward_kernel", "course.fused:backward_kernel",
           "course.fused:update_kernel", "course.merged:sgd_gridstride_kernel")


class NoDevice:  # device functions (has_tma) ask the current device for its compute capability
    compute_capability = CC


dispatcher.get_current_device = NoDevice
numba.cuda.get_current_device = NoDevice

import course  # noqa: E402,F401  (after the fake device: course.fused asks it at import)
from numba import cuda, types  # noqa: E402
from course.tools.signatures import all_signatures  # noqa: E402

names = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
os.makedirs(sys.argv[2], exist_ok=True)
for key in KERNELS:
    module, name = key.split(":")
    for j, sig in enumerate(all_signatures()[key]):
        ptx, _ = cuda.compile_ptx(getattr(importlib.import_module(module), name).py_func, eval(f"({sig},)", {}, names),
                                  cc=CC)
        open(f"{sys.argv[2]}/{name}-{j}.ptx", "w").write(ptx)
print(f"wrote {sys.argv[2]}: the PTX of {len(KERNELS)} kernels for sm_{CC[0]}{CC[1]}")
