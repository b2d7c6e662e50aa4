"""Every kernel compiles for the GPUs students have (PTX for sm_75, sm_80, sm_86, sm_89, sm_90; registers and shared
memory from ptxas within each target's limits), checked on a machine without one.

The simulator runs kernels as Python and never type-checks them, so a kernel can pass every simulated test and
fail at its first compile on a GPU (a float64 literal is fine, a dict is not; numpy 2.5 broke numba-cuda here)."""
import importlib
import os
import pkgutil
import re
import subprocess
import sys

import pytest

import course
import course.runtime
from course.runtime import device
from course.tools import compile
from course.tools.signatures import all_signatures


@pytest.mark.slow
@pytest.mark.skipif(bool(device.simulator_only()), reason=f"{device.simulator_only()}; CI compiles on Linux")
def test_every_kernel_compiles_for_the_five_targets():
    """PTX for sm_75, sm_80, sm_86, sm_89, sm_90 (a kernel's other layouts: sm_75 and the highest), course.fused a
    second time with the copy engine on for sm_90; ptxas on each kernel's first signature for every target."""
    r = subprocess.run([sys.executable, "-m", "course.tools.compile"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for key, sigs in all_signatures().items():
        for i, sig in enumerate(sigs):
            (line,) = [x for x in lines if x.startswith(f"ok   {key}({sig}): ")]
            want = ", ".join(compile.sm(cc) for cc in compile.targets_for(importlib.import_module(key.split(":")[0]),
                                                                          i == 0, copies=False))
            assert f"PTX for {want}" in line
            if i == 0 and compile.find_ptxas():
                assert line.count(" regs ") == want.count("sm_"), line  # ptxas ran for every target
    assert "ok   course.fused: the TMA's Hopper-only PTX in sm_90's code only" in lines
    copy_lines = [x for x in lines if "[TMA on]: PTX for sm_90" in x]
    assert len(copy_lines) == sum(len(s) for k, s in all_signatures().items() if k.startswith("course.fused:"))
    assert epoch_spill_problems(lines) == []


# bytes spilled per thread, by the CUDA release of the compiler (its ptxas), which allocates registers differently:
# CUDA 12 (the numba-cuda[cu12] wheels students install): 248, 248, 0, 0 and 32 now; 6280691's 164, 164, 0, 0, 24;
# momentum and chunks' first version 640, 640, 376, 376, 1,060. CUDA 13 (the GPU machines' toolkit, 13.0): 980, 980,
# 420, 420 and 32 now; 6280691's 832, 816, 120, 120, 24.
EPOCH_SPILLS = {12: {"sm_75": 320, "sm_80": 320, "sm_86": 64, "sm_89": 64, "sm_90": 64},
                13: {"sm_75": 1024, "sm_80": 1024, "sm_86": 448, "sm_89": 448, "sm_90": 64}}


def cuda_release(ptxas):
    """The CUDA release (12, 13, ...) of a ptxas, from its --version, or None."""
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout if ptxas else ""
    m = re.search(r"release (\d+)\.", out)
    return int(m.group(1)) if m else None


def epoch_spill_problems(lines, release=None):
    """The targets where the compile tool's lines say fused_steps_kernel spills more than EPOCH_SPILLS allows (its
    spills sit in the epoch's hot loops: local-memory traffic every step)."""
    found = {}
    for line in lines:
        if line.startswith("ok   course.fused:fused_steps_kernel(") and "; ptxas " in line:
            for cc, spilled in re.findall(r"(sm_\d+) \d+ regs \d+ B smem(?: (\d+) B spilled)?", line):
                found[cc] = int(spilled or 0)
    release = release or cuda_release(compile.find_ptxas()) or 12
    caps = EPOCH_SPILLS[min(max(release, 12), 13)]
    problems = [f"{cc}: {found[cc]} B spilled > {cap}" for cc, cap in caps.items() if found.get(cc, 0) > cap]
    return problems + [f"{cc}: no ptxas figure" for cc in caps if cc not in found]


PTX_75 = """.version 8.8
.target sm_75
.address_size 64
// cp.async.bulk in a comment is no instruction
.visible .shared .align 16 .b8 _cudapy_smem_1[25616];
.visible .shared .align 8 .b8 _cudapy_smem_2[8];
.visible .shared .align 16 .b8 _cudapy_smem_3[3744];
\tld.global.f32 %f1, [%rd1];
"""
PTX_90 = PTX_75.replace("sm_75", "sm_90") + (
    "\t{ .reg .u64 a; mbarrier.init.shared::cta.b64 [m], 1; }\n"
    "\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [d], [g], r1, [m];\n")
PTXAS_LOG = """ptxas info    : Compiling entry function '_Z6kernel' for 'sm_75'
ptxas info    : Function properties for _Z6kernel
    192 bytes stack frame, 420 bytes spill stores, 420 bytes spill loads
ptxas info    : Used 128 registers, 47808 bytes smem, 472 bytes cmem[0]
ptxas info    : Used 16 registers, 380 bytes cmem[0]
"""


def test_the_epoch_kernels_spills_are_held_to_a_budget():
    head = "ok   course.fused:fused_steps_kernel(Batch(...)) "
    lines = [head + ": PTX for sm_75, sm_80, sm_86, sm_89; ptxas sm_75 128 regs 47808 B smem 248 B spilled; "
             "sm_80 128 regs 47808 B smem 248 B spilled; sm_86 120 regs 47808 B smem; sm_89 120 regs 47808 B smem",
             head + "[TMA on]: PTX for sm_90; ptxas sm_90 128 regs 47808 B smem 32 B spilled"]
    assert epoch_spill_problems(lines, 12) == []
    lines[1] = lines[1].replace(" 32 B", " 1060 B")
    lines[0] = lines[0].replace("sm_86 120 regs 47808 B smem;", "sm_86 128 regs 47808 B smem 376 B spilled;")
    assert epoch_spill_problems(lines, 12) == ["sm_86: 376 B spilled > 64", "sm_90: 1060 B spilled > 64"]
    assert epoch_spill_problems(lines[:1], 12) == ["sm_86: 376 B spilled > 64", "sm_90: no ptxas figure"]
    assert epoch_spill_problems(lines, 13) == ["sm_90: 1060 B spilled > 64"]    # CUDA 13 spills more at sm_86
    assert cuda_release(compile.find_ptxas()) in (None, 12, 13)


def test_hopper_only_instructions_are_found_in_code_not_comments():
    assert compile.hopper_only(PTX_75) == []
    assert compile.hopper_only(PTX_90) == ["cp.async.bulk", "mbarrier"]


def test_a_hopper_instruction_below_sm_90_or_a_wrong_target_fails():
    assert compile.check_ptx(None, {(7, 5): PTX_75, (9, 0): PTX_90}) == []
    (problem,) = compile.check_ptx(None, {(8, 6): PTX_90.replace("sm_90", "sm_86")})
    assert problem == "sm_86 PTX has Hopper-only cp.async.bulk, mbarrier"
    assert compile.check_ptx(None, {(8, 0): PTX_75}) == ["sm_80: no `.target sm_80` line"]


def test_ptxas_resources_are_read_and_checked_against_each_target():
    res = compile.parse_ptxas(PTXAS_LOG)
    assert res == dict(registers=128, shared=47808, spills=840, local=192)
    assert compile.ptx_shared_bytes(PTX_75) == 25616 + 8 + 8 + 3744  # 25,632: the third array starts 16-aligned
    assert compile.limit_problems(res, (7, 5), max_registers=128) == []
    assert compile.limit_problems(res, (7, 5), max_registers=96) == ["128 registers per thread > 96"]
    big = dict(res, shared=50 * 1024)
    assert compile.limit_problems(big, (9, 0)) == ["51200 bytes of shared memory > 49152"]


def test_only_course_fused_depends_on_the_target():
    import course.fused
    import course.scale
    everywhere = compile.targets_for(course.scale, first=True, copies=False)
    assert everywhere == list(compile.TARGETS) == [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0)]
    assert compile.targets_for(course.scale, first=False, copies=False) == [(7, 5), (9, 0)]
    assert compile.targets_for(course.fused, first=True, copies=False) == [(7, 5), (8, 0), (8, 6), (8, 9)]
    assert compile.targets_for(course.fused, first=True, copies=True) == [(9, 0)]
    assert compile.targets_for(course.scale, first=True, copies=True) == []


def test_signature_table_lists_every_kernel():
    from course.tools.compile import kernels_in
    found = set()
    for pkg in (course, course.runtime):  # the lessons and the runtime; course.tools and course.checks define none
        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name == "__main__" or m.ispkg:
                continue
            name = f"{pkg.__name__}.{m.name}"
            found |= {f"{name}:{k}" for k in kernels_in(importlib.import_module(name))}
    assert found == set(all_signatures()), "list the new kernels in their topic's table of course/tools/signatures.py"
