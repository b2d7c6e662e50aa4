"""Compile course kernels for the GPUs students have, without one: the simulator never type-checks.

Run as `COURSE_DEVICE=gpu python -m course.tools.compile [PART_OF_NAME ...]`; needs NVVM (numba-cuda[cu12] brings
it). Every kernel and signature of course/tools/signatures.py ("module:kernel" -> argument types as numba spells
them: "C" layout `[::1]` as launchers pass them, "A" layout `[:]` as the checks' guarded views do) is typed and
lowered once, then NVVM makes PTX from it for each target (the cheap part): a kernel's first signature for every
one of TARGETS, its other layouts for the lowest and highest. A module whose code depends on the target
(course.fused: the TMA bulk copies, PTX cp.async.bulk, sm_90 only) is lowered here with the TMA off for sm_75 to
sm_89, and by a second process, at the same time, with it on for sm_90. Checked: no Hopper-only instruction in a
non-Hopper target's PTX (and such a module's sm_90 PTX has one, or the check could not see it); where ptxas is
found (the numba-cuda[cu12] wheels bring it), each kernel's first signature assembled for every target, its
registers and shared memory within that target's limits. Prints one line per kernel and signature, exits 1 if any
fails."""
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course.tools.signatures import all_signatures, namespace

Limits = namedtuple("Limits", "gpus shared_per_sm")
STATIC_SHARED = 48 * 1024     # bytes of static shared memory a kernel may declare, on every target
REGS_PER_THREAD = 255
TARGETS = {  # compute capability: who has it, shared memory per SM in bytes (CUDA's table of limits per target)
    (7, 5): Limits("T4 (Colab), RTX 20xx", 64 * 1024),
    (8, 0): Limits("A100", 164 * 1024),
    (8, 6): Limits("RTX 30xx, A10", 100 * 1024),
    (8, 9): Limits("RTX 40xx, L4", 100 * 1024),
    (9, 0): Limits("H100, H200", 228 * 1024),
}
HOPPER = (9, 0)
HOPPER_ONLY = ("cp.async.bulk", "mbarrier", "fence.proxy.async", "wgmma", "setmaxnreg", "elect.sync", "st.async",
               "red.async", "multimem")  # PTX of sm_90 only (mbarrier: the course uses it for the TMA only)
TARGET_DEPENDENT = "has_tma"  # a module that defines this asks it while generating code
CC = HOPPER                   # the target numba's own lowering sees (the same IR for every target from sm_75 on)
COPIES_FLAG = "--tma"  # the second process: target-dependent modules lowered with the TMA on


def is_kernel(v):
    """A @cuda.jit kernel (real or simulated), not a device function."""
    if type(v).__name__ not in ("CUDADispatcher", "FakeCUDAKernel"):
        return False
    device = getattr(v, "_device", None)
    if device is None:
        device = getattr(v, "targetoptions", {}).get("device", False)
    return not device


def kernels_in(module):
    """Names of the CUDA kernels a module defines (device functions are compiled with their callers)."""
    return sorted(n for n, v in vars(module).items()
                  if is_kernel(v) and getattr(v.py_func, "__module__", None) == module.__name__)


def sm(cc):
    """"sm_75" for (7, 5)."""
    return f"sm_{cc[0]}{cc[1]}"


def hopper_only(ptx):
    """The Hopper-only instructions in a PTX text (instruction lines only, not comments)."""
    code = "\n".join(line.split("//")[0] for line in ptx.splitlines())
    return sorted({op for op in HOPPER_ONLY if re.search(r"(^|[\s{;])" + re.escape(op), code, re.M)})


def find_ptxas():
    """ptxas of the nvidia-cuda-nvcc wheel (numba-cuda[cu12]), else on PATH, else None."""
    try:
        import nvidia.cuda_nvcc
        for root in nvidia.cuda_nvcc.__path__:
            exe = Path(root) / "bin" / "ptxas"
            if exe.exists():
                return str(exe)
    except ImportError:
        pass
    return shutil.which("ptxas")


def ptxas_resources(ptx, cc, max_registers=None, ptxas=None):
    """Assemble PTX for `cc` with ptxas -v: {registers, shared (bytes), spills (bytes), local (stack bytes)} of the
    entry (the largest, if there are several). A cooperative kernel calls cudadevrt, which only the link brings:
    it is assembled as relocatable code (-c), where ptxas leaves module-level shared arrays (numba's) out of its
    count, so shared memory is also summed from the PTX's declarations and the larger taken. Raises RuntimeError
    with ptxas's message when it refuses."""
    ptxas = ptxas or find_ptxas()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        Path(src).write_text(ptx)
        cmd = [ptxas, "-v", f"-arch={sm(cc)}", src, "-o", os.path.join(tmp, "k.cubin")]
        if max_registers:
            cmd[1:1] = [f"-maxrregcount={max_registers}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0 and "Unresolved extern function" in r.stderr:
            r = subprocess.run(cmd[:1] + ["-c"] + cmd[1:], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"ptxas {sm(cc)}: {' '.join(r.stderr.split())[:500]}")
    res = parse_ptxas(r.stderr)
    return dict(res, shared=max(res["shared"], ptx_shared_bytes(ptx)))


def ptx_shared_bytes(ptx):
    """Bytes of the static shared arrays a PTX module declares (`.shared .align A .b8 name[N];`), aligned."""
    total = 0
    for align, size in re.findall(r"^\s*(?:\.visible\s+|\.global\s+)?\.shared\s+\.align\s+(\d+)\s+\.b8\s+\w+\[(\d+)\]",
                                  ptx, re.M):
        total = -(-total // int(align)) * int(align) + int(size)
    return total


def parse_ptxas(log):
    """ptxas -v's lines -> the resources of its largest entry (by registers)."""
    entries = []
    for m in re.finditer(r"Used (\d+) registers(.*)", log):
        rest = m.group(2)
        smem = re.search(r"(\d+) bytes smem", rest)
        entries.append(dict(registers=int(m.group(1)), shared=int(smem.group(1)) if smem else 0))
    if not entries:
        raise RuntimeError(f"no 'Used N registers' line in ptxas's output: {log[:300]}")
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    stack = [int(s) for s in re.findall(r"(\d+) bytes stack frame", log)]
    return dict(max(entries, key=lambda e: e["registers"]), spills=max(spills, default=0), local=max(stack, default=0))


def limit_problems(res, cc, max_registers=None):
    """What of a kernel's resources does not fit target `cc` (a list of sentences)."""
    lim, out = TARGETS[cc], []
    cap = min(REGS_PER_THREAD, max_registers or REGS_PER_THREAD)
    if res["registers"] > cap:
        out.append(f"{res['registers']} registers per thread > {cap}")
    if res["shared"] > min(STATIC_SHARED, lim.shared_per_sm):
        out.append(f"{res['shared']} bytes of shared memory > {min(STATIC_SHARED, lim.shared_per_sm)}")
    return out


def main(argv=None):
    """Compile here with the TMA off (every target below sm_90, and sm_90 for target-independent modules);
    meanwhile a second process lowers the target-dependent modules with it on, for sm_90 (a device function
    compiles once per process and signature, so one process cannot lower both ways)."""
    argv = sys.argv[1:] if argv is None else argv
    copies = COPIES_FLAG in argv
    only = [a for a in argv if a != COPIES_FLAG]
    import course
    if course.SIMULATOR:
        print("run with COURSE_DEVICE=gpu: the simulator cannot compile", file=sys.stderr)
        return 2
    child = None if copies else subprocess.Popen([sys.executable, "-m", "course.tools.compile", COPIES_FLAG, *only],
                                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    from course.runtime.device import pretend_device
    with pretend_device(CC):  # device functions ask the current device for its compute capability
        failed = compile_all(find_ptxas(), only=only, copies=copies)
    if child is not None:
        out, _ = child.communicate(timeout=900)
        print(out, end="")
        failed |= child.returncode != 0
    return 1 if failed else 0


def targets_for(module, first, copies):
    """The targets a kernel signature gets PTX for in this process: all (the first signature of a kernel) or the
    lowest and highest (its other layouts); in the TMA process sm_90 for target-dependent modules only."""
    dependent = hasattr(module, TARGET_DEPENDENT)
    if copies:
        return [HOPPER] if dependent else []
    targets = [cc for cc in TARGETS if not (dependent and cc == HOPPER)]
    return targets if first else [targets[0], targets[-1]]


def ptx_per_target(module, kernel, argtypes, targets):
    """{cc: PTX} of one kernel and signature: lowered once, NVVM for each target."""
    from course.runtime.device import lower_kernel
    emit = lower_kernel(kernel.py_func, argtypes, CC)
    return {cc: emit(cc) for cc in targets}


def check_ptx(module, ptx):
    """Problems with a kernel's PTX per target: a Hopper-only instruction below sm_90, a wrong .target line."""
    problems = []
    for cc, text in ptx.items():
        if not re.search(rf"^\.target {sm(cc)}\b", text, re.M):
            problems.append(f"{sm(cc)}: no `.target {sm(cc)}` line")
        found = hopper_only(text)
        if cc < HOPPER and found:
            problems.append(f"{sm(cc)} PTX has Hopper-only {', '.join(found)}")
    return problems


def resources_line(kernel, ptx, ptxas):
    """ptxas for every target: a short summary, and the problems."""
    cap = getattr(kernel, "targetoptions", {}).get("max_registers")
    parts, problems = [], []

    def assemble(cc):
        try:
            return ptxas_resources(ptx[cc], cc, cap, ptxas)
        except RuntimeError as e:
            return str(e)
    with ThreadPoolExecutor(max_workers=len(ptx)) as pool:   # the ptxas processes side by side (CI has 2 cores)
        results = dict(zip(ptx, pool.map(assemble, ptx)))
    for cc, res in results.items():
        if isinstance(res, str):
            problems.append(res)
            continue
        problems += [f"{sm(cc)}: {p}" for p in limit_problems(res, cc, cap)]
        parts.append(f"{sm(cc)} {res['registers']} regs {res['shared']} B smem" +
                     (f" {res['spills']} B spilled" if res["spills"] else ""))
    return "; ".join(parts), problems


def compile_all(ptxas, only=(), copies=False):
    """Every kernel (or those whose "module:kernel" contains one of `only`) for each signature, PTX for each of
    its targets (targets_for); ptxas on each kernel's first signature. A line each; return 1 if any failed."""
    names = namespace()
    failed, hopper_seen = 0, {}
    if ptxas is None and not copies:
        print("note: no ptxas (the numba-cuda[cu12] wheels bring one): registers and shared memory not checked")
    tag = " [TMA on]" if copies else ""
    for key, sigs in all_signatures().items():
        if only and not any(o in key for o in only):
            continue
        modname, kname = key.split(":")
        module = importlib.import_module(modname)
        if hasattr(module, TARGET_DEPENDENT):
            setattr(module, TARGET_DEPENDENT, lambda: copies)   # what its intrinsics ask while generating code
        kernel = getattr(module, kname)
        for i, sig in enumerate(sigs):
            targets = targets_for(module, i == 0, copies)
            if not targets:
                continue
            try:
                ptx = ptx_per_target(module, kernel, eval(f"({sig},)", {}, names), targets)
                problems = check_ptx(module, ptx)
                summary = ""
                if ptxas and i == 0:
                    summary, more = resources_line(kernel, ptx, ptxas)
                    problems += more
                if copies:
                    hopper_seen[modname] = hopper_seen.get(modname, False) or bool(hopper_only(ptx[HOPPER]))
            except Exception as e:  # report every failure, not only the first
                problems = [f"{type(e).__name__}: " + str(e).replace("\n", "\n     ")[:3000]]
            if problems:
                failed += 1
                print(f"FAIL {key}({sig}){tag}: " + "; ".join(problems), flush=True)
            else:
                print(f"ok   {key}({sig}){tag}: PTX for {', '.join(sm(cc) for cc in ptx)}" +
                      (f"; ptxas {summary}" if summary else ""), flush=True)
    for modname, seen in hopper_seen.items():
        if not seen:
            failed += 1
            print(f"FAIL {modname}: its sm_90 PTX has no Hopper-only instruction, so the check for one below sm_90 "
                  "could not see one: is HOPPER_ONLY up to date?")
        else:
            print(f"ok   {modname}: the TMA's Hopper-only PTX in sm_90's code only")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
