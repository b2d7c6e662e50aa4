"""Every figure the prose quotes has one source, checked.

The notebooks' markdown, README.md and notebooks/results/fused-history.md quote numbers from GPU runs ("41 ms per
epoch", "19× faster"). FIGURES lists each one: the notebook cell (by its `id`), README or HISTORY (fused-history.md,
notebook 11's kernel history), a regex whose group 1 is the figure as written, where the figure comes from, and how
close it must be:

- `Out(nb, cell, regex)`: group 1 of `regex` in the saved outputs of code cell `cell` of notebook `nb`;
- `Json(file, "rows[impl=course_fused].epoch_s")`: a key of notebooks/results/FILE (`list[field=value]` picks the
  element of a list whose field has that value);
- `Ptxas(kernel, maxrreg)`: registers or spilled bytes per thread, from `ptxas -v` on the kernel's sm_90 PTX;
- `Calc(fn, *sources)`: arithmetic on constants, the dataset or other sources;
- `Spec(key)`: a published figure (H200 data sheet, microbenchmark papers), listed once in SPECS with its origin.

A written figure passes when it equals the source to the precision it is written in ("41" for 40.66), or lies
within the entry's relative tolerance `tol`. The scan (`test_every_figure_has_a_source`) finds every
"<number> <unit>" in the prose (ms, µs, s, TFLOP/s, GFLOP, GB/s, TB/s, %, ×, "times"), so a figure cannot enter the
prose without an entry here.

After the notebooks or the benchmark are re-run on the GPU: `python tests/test_figures.py --update` rewrites every
figure that left its tolerance with its source's new value (keeping the decimals written) and lists the changes;
review them (the sentence around a figure may need new words), then commit.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
RESULTS = NOTEBOOKS / "results"
README = "README"
HISTORY = "fused-history"   # notebooks/results/fused-history.md: notebook 11's kernel history (scanned like README)


def md_files():
    """{where: path} of the Markdown files scanned besides the notebooks (read at call time: tests patch ROOT)."""
    return {README: ROOT / "README.md", HISTORY: RESULTS / "fused-history.md"}


def where_name(where, cell):
    """How an error message names a figure's place."""
    return md_files()[where].name if where in md_files() else f"{where} {cell}"

# ------------------------------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------------------------------

SPECS = {  # published figures, each with its origin; the prose quotes them, the test checks the prose against them
    "h200_fp32_tflops": (67.0, "NVIDIA H200 data sheet: FP32 (CUDA cores) 67 TFLOPS"),
    "h200_tf32_dense_tflops": (494.7, "NVIDIA H200 data sheet: TF32 Tensor Core 989 TFLOPS with sparsity, half dense"),
    "h200_hbm_tbs": (4.8, "NVIDIA H200 data sheet: HBM3e 4.8 TB/s"),
    "h100_hbm_tbs": (3.35, "NVIDIA H100 SXM data sheet: HBM3 3.35 TB/s"),
    "smem_over_global_latency": (20.0, "Jia et al., 'Dissecting the NVIDIA Volta GPU architecture via "
                                       "microbenchmarking'"
                                       " (2018) and its Turing/Ampere/Hopper sequels: shared memory ~20-30 cycles, "
                                       "global memory ~400-600"),
    "sm_max_warps": (64, "CUDA programming guide, compute capability 9.0: 64 resident warps per SM"),
}


def _nb_path(nb):
    matches = sorted(NOTEBOOKS.glob(f"{nb}*.ipynb"))
    assert len(matches) == 1, f"notebook {nb!r}: found {matches}"
    return matches[0]


@lru_cache(maxsize=None)
def _cells(nb):
    """{cell id: cell} of a notebook (nb: its number, "08", or its stem)."""
    return {c["id"]: c for c in json.loads(_nb_path(nb).read_text(encoding="utf-8"))["cells"]}


def _src(cell):
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def output_text(nb, cell):
    """The saved text outputs of a code cell (streams and text/plain), concatenated."""
    c = _cells(nb)[cell]
    assert c["cell_type"] == "code", f"{nb} {cell} is not a code cell"
    parts = []
    for o in c.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append("".join(o["text"]) if isinstance(o["text"], list) else o["text"])
        elif "text/plain" in o.get("data", {}):
            t = o["data"]["text/plain"]
            parts.append("".join(t) if isinstance(t, list) else t)
    return "".join(parts)


def _number(text):
    return float(text.replace(",", "").replace("\u2009", ""))


@dataclass(frozen=True)
class Out:
    nb: str
    cell: str
    regex: str

    def value(self):
        text = output_text(self.nb, self.cell)
        m = re.search(self.regex, text)
        assert m, f"notebook {self.nb} cell {self.cell}: no {self.regex!r} in its saved output:\n{text[:2000]}"
        return _number(m.group(1))

    def __str__(self):
        return f"output of {self.nb} cell {self.cell}"


@dataclass(frozen=True)
class Json:
    file: str
    key: str

    def value(self):
        data = json.loads((RESULTS / self.file).read_text(encoding="utf-8"))
        for part in re.findall(r"\w+\[[^\]]*\]|\w+", self.key):  # a.b[k=v.w].c: dots inside [] belong to v
            m = re.fullmatch(r"(\w+)\[(.+)\]", part)
            if not m:
                data = data[part]
                continue
            conds = dict(c.split("=", 1) for c in m.group(2).split(","))
            rows = [r for r in data[m.group(1)] if all(str(r.get(k)) == v for k, v in conds.items())]
            assert len(rows) == 1, f"{self.file}: {part} matches {len(rows)} elements"
            data = rows[0]
        assert isinstance(data, (int, float)), f"{self.file}: {self.key} is {data!r}, not a number"
        return float(data)

    def __str__(self):
        return f"{self.file}: {self.key}"


@dataclass(frozen=True)
class Calc:
    fn: object
    args: tuple = ()
    why: str = ""

    def value(self):
        return float(self.fn(*(a.value() for a in self.args)))

    def __str__(self):
        return f"arithmetic ({self.why})" + (" on " + ", ".join(map(str, self.args)) if self.args else "")


def calc(fn, *args, why=""):
    return Calc(fn, tuple(args), why)


@dataclass(frozen=True)
class Spec:
    key: str

    def value(self):
        return float(SPECS[self.key][0])

    def __str__(self):
        return SPECS[self.key][1]


def find_ptxas():
    """ptxas from the nvidia-cuda-nvcc wheel numba-cuda[cu12] installs, else from PATH or /usr/local/cuda."""
    import site
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        p = Path(base) / "nvidia" / "cuda_nvcc" / "bin" / "ptxas"
        if p.exists():
            return str(p)
    return shutil.which("ptxas") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/ptxas")), None)


_PTXAS_SCRIPT = r"""
import sys, numba.cuda.dispatcher as dispatcher
class _NoDevice:
    compute_capability = (9, 0)
dispatcher.get_current_device = _NoDevice
import numba.cuda
numba.cuda.get_current_device = _NoDevice    # the TMA's PTX too (course.fused.has_tma)
import importlib, course
from numba import cuda
from course.tools.signatures import all_signatures, namespace
key = sys.argv[1]
mod, name = key.split(":")
sig = all_signatures()[key][0]
names = namespace()
ptx, _ = cuda.compile_ptx(getattr(importlib.import_module(mod), name).py_func, eval(f"({sig},)", {}, names), cc=(9, 0))
sys.stdout.write(ptx)
"""


@lru_cache(maxsize=None)
def kernel_ptx(kernel):
    """sm_90 PTX of a course kernel ("course.fused:fused_steps_kernel") at its first signature in
    course/tools/signatures.py, compiled in a subprocess (this one runs the simulator, which cannot compile)."""
    env = {**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _PTXAS_SCRIPT, kernel], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@lru_cache(maxsize=None)
def ptxas_report(kernel, maxrreg):
    """(registers, spill store bytes) per thread of a course kernel, by `ptxas -v` (capped at maxrreg if not 0)."""
    ptxas = find_ptxas()
    if ptxas is None:
        pytest.skip("ptxas not found (numba-cuda[cu12] brings it on Linux)")
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(kernel_ptx(kernel))
        cmd = [ptxas, "-v", "-arch=sm_90", "-c", str(ptx), "-o", str(Path(tmp) / "k.o")]
        if maxrreg:
            cmd[1:1] = ["--maxrregcount", str(maxrreg)]
        rep = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    regs = int(re.search(r"Used (\d+) registers", rep.stderr).group(1))
    spill = int(re.search(r"(\d+) bytes spill stores", rep.stderr).group(1))
    return regs, spill


@dataclass(frozen=True)
class Ptxas:
    kernel: str
    maxrreg: int = 0
    field: str = "registers"

    def value(self):
        regs, spill = ptxas_report(self.kernel, self.maxrreg)
        return regs if self.field == "registers" else spill

    def __str__(self):
        cap = f" --maxrregcount {self.maxrreg}" if self.maxrreg else ""
        return f"ptxas -v{cap} on {self.kernel} (sm_90): {self.field}"


def _nbgrader_timeout():
    """The per-cell timeout teachers/nbgrader_config.py gives nbgrader."""
    text = (Path(__file__).resolve().parent.parent / "teachers" / "nbgrader_config.py").read_text(encoding="utf-8")
    return int(re.search(r"timeout\s*=\s*(\d+)", text).group(1))


@lru_cache(maxsize=None)
def mnist_blank_pixels():
    """(pixels 0 in every training image, of them on the outer ring, ring size, off the ring)."""
    import numpy as np
    from course.data import load_mnist
    X = load_mnist()[0]
    blank = (X.max(axis=0) == 0).reshape(28, 28)
    ring = np.ones((28, 28), bool)
    ring[1:-1, 1:-1] = False
    return int(blank.sum()), int((blank & ring).sum()), int(ring.sum()), int((blank & ~ring).sum())


# ------------------------------------------------------------------------------------------------------------------
# The registry: one entry per figure in the prose
# ------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fig:
    where: str        # notebook number ("08"), README or HISTORY
    cell: str         # markdown cell id ("" for README and HISTORY)
    phrase: str       # regex, spaces match any whitespace; group 1 is the figure
    source: object
    tol: float = 0.0  # relative tolerance beyond the precision the figure is written in


BENCH = min(p.name for p in RESULTS.glob("bench-*.json"))   # one benchmark, named after its GPU
FUSED = "fused-h200.json"
FUSED_S = Json(BENCH, "rows[impl=course_fused].epoch_s")
SCALING = min(p.name for p in RESULTS.glob("scaling-*.json"))   # one sweep, named after its GPU
RACE = min(p.name for p in RESULTS.glob("race-*.json"))   # one race, named after the GPU it ran on


def RACE_ROW(impl, batch):
    """Milliseconds of the race's fastest 5-seed row (final or neighbour) of `impl` at `batch`."""
    return calc(lambda: 1e3 * min(r["seconds_to_target"] for r in json.loads((RESULTS / RACE).read_text())["rows"]
                                  if r["stage"] != "sweep" and r["impl"] == impl and r["batch_size"] == batch
                                  and r["seconds_to_target"] is not None),
                why=f"the race's fastest 5-seed row of {impl} at batch {batch}")


@dataclass(frozen=True)
class RaceBest:
    """The fastest final median of the race among implementations starting with `prefix` (course.tools.race.best)."""
    prefix: str

    def value(self):
        from course.tools.race import best
        return float(best(json.loads((RESULTS / RACE).read_text())["rows"], self.prefix)["seconds_to_target"])

    def __str__(self):
        return f"{RACE}: the fastest final row of {self.prefix}*"


RACE_BEST = RaceBest


def _fused_occupancy():
    """The epoch kernel's blocks per SM, the registers its block takes, its shared memory and the blocks that allows."""
    from course import fused as f
    smem = f.block_smem(f.TK, f.CHUNK)
    return (f.blocks_per_sm(f.THREADS, f.REGS, smem), f.THREADS * f.REGS, smem,
            f.SM_SMEM // (smem + f.BLOCK_SMEM_RESERVED))



def _race_tool():
    """course.tools.race: the race's rules (its constants)."""
    from course.tools import race
    return race


def EPOCH_MS(impl, batch):
    """An epoch's milliseconds in the batch-size sweep (scaling-*.json)."""
    return calc(lambda s: s * 1e3, Json(SCALING, f"rows[impl={impl},batch_size={batch}].epoch_s"))


def STEP_US(impl, batch):
    """A step's microseconds in the batch-size sweep: the epoch over its 60,000 // batch steps."""
    return calc(lambda s: s * 1e6 / (60000 // batch), Json(SCALING, f"rows[impl={impl},batch_size={batch}].epoch_s"))
TORCH_S = Json(BENCH, "rows[impl=pytorch_eager].epoch_s")
PLAIN_S = Json(BENCH, "rows[impl=course_plain].epoch_s")
PLAIN_GRAPH_S = Json(BENCH, "rows[impl=course_plain_graph].epoch_s")
SPEEDUP_10 = Out("13", "c058", r"speed-up ([\d.]+)x")
LAUNCH_3 = Out("08", "c007", r"3 arrays\s*:\s*([\d.]+) µs")        # a launch with three array arguments
LAUNCH_0 = Out("08", "c007", r"no argument\s*:\s*([\d.]+) µs")
PLAIN_EPOCH_06 = Out("06", "c029", r"SGD lr 0.1, 784-128-10\s+([\d.]+) s per epoch")
LADDER_TF = lambda name: Out("15", "c028", r"4096² × 4096\s+" + re.escape(name) + r"\s+([\d.]+) TFLOP")  # noqa
FP32_MS = Out("08", "c019", r"at FP32 peak: ([\d.]+) ms")
RUNG_MS = lambda name, cell: Out("12", cell, r"(?m)^" + name + r"\s.*\s([\d.]+)$")  # noqa: E731  (12's ladder rows)
FUSED1_MS, FUSED2_MS, FUSED3_MS = RUNG_MS("fused1", "k_l1"), RUNG_MS("fused2", "k_l2"), RUNG_MS("fused3", "k_l3")
from course.epoch import CLOCK_PARTS  # noqa: E402
CLOCK = lambda part: Out("13", "ck3", part + r"\s+([\d.]+) µs")  # noqa: E731  (clock_report's lines)
FINAL = "versions[epoch_ms=12.22]"    # course.fused after step 7 (the TMA): its row of fused-h200.json
NOW = "versions[epoch_ms=8.56]"       # course.fused now: its row of fused-h200.json
GRAPH_REPLAY_RATIO_08 = Out("08", "cg9", r"plain, graph\s+([\d.]+) of this run's plain step")   # 08's own run
MERGED_RATIO_10 = Out("10", "p_tc", r"merged \(9 launches/step\)\s+([\d.]+) of this run's plain step")
A_FWD = CLOCK(r"A: X W1 in registers, added across lanes \(shuffles\) and into Z \(atomics\)")
MB_IMAGES = 60000 * 784 * 4
STEPS = 60000 // 64
PARAMS = 784 * 128 + 128 + 128 * 10 + 10


# ------------------------------------------------------------------------------------------------------------------
# One figure per quantity
# ------------------------------------------------------------------------------------------------------------------
# Each quantity the prose quotes comes from ONE run, its canonical source, and reads the same wherever it appears.
# Other runs of it (a notebook cell's own timing, the batch-size sweep) appear only inside their own table: as a
# ratio of that run's own figures (the prose quotes the canonical figure only). FIGURES entries of a quantity
# take `Qty(name)` as their source (`scale` converts to the unit written: 1e-3 for seconds of a quantity in ms).
QUANTITIES = {  # name (unit): (canonical source, [other runs of it])
    "plain epoch, ms": (calc(lambda s: s * 1e3, PLAIN_S),
                        [PLAIN_EPOCH_06, Json(SCALING, "rows[impl=course_plain,batch_size=64].epoch_s")]),
    "plain step, µs": (calc(lambda s: s * 1e6 / STEPS, PLAIN_S, why="the epoch over its 937 steps"),
                       []),
    "plain graph epoch, ms": (calc(lambda s: s * 1e3, PLAIN_GRAPH_S),
                              [Json(SCALING, "rows[impl=course_plain_graph,batch_size=64].epoch_s")]),
    "plain graph step, µs": (calc(lambda s: s * 1e6 / STEPS, PLAIN_GRAPH_S, why="the epoch over its 937 steps"),
                             []),
    "fused epoch, ms": (calc(lambda s: s * 1e3, FUSED_S),
                        [Json(SCALING, "rows[impl=course_fused,batch_size=64].epoch_s")]),
    "PyTorch eager epoch, ms": (calc(lambda s: s * 1e3, TORCH_S),
                                [Json(SCALING, "rows[impl=pytorch_eager,batch_size=64].epoch_s")]),
    "fused speed-up over the plain loop, ×": (calc(lambda p, f: p / f, PLAIN_S, FUSED_S), [SPEEDUP_10]),
    "launch with 3 arrays, µs": (LAUNCH_3, []),
    "grid barrier in the epoch kernel, µs": (
        Out("13", "ck3", r"barrier 1 \(last arrival to first release\)\s+([\d.]+) µs"), [Json(FUSED, NOW + ".clocks_us.barrier1")]),
}
OTHER_RUN_CELLS_NOT_YET = {  # (where, cell): why it still quotes another run outside its table (not this branch's)
    ("06", "c028"): "notebook 06's prose (another engineer's): 08's launch against 06's own epoch, 'here'",
}


@dataclass(frozen=True)
class Qty:
    """A quantity of QUANTITIES, from its canonical source, times `scale` (the unit the prose writes)."""
    name: str
    scale: float = 1.0

    def value(self):
        return QUANTITIES[self.name][0].value() * self.scale

    def __str__(self):
        return f"{self.name} from {QUANTITIES[self.name][0]}" + (f" (× {self.scale:g})" if self.scale != 1 else "")


FIGURES = [
    # --- 01 ---
    Fig("01", "c012", r"stopped at (80)%", calc(lambda: 80, why="an illustration, not a measurement")),
    Fig("01", "c028", r"pixels, (4) times fewer bytes", calc(lambda: 4 / 1, why="float32 is 4 bytes, uint8 one")),
    Fig("01", "c025", r"(67) of the 784", calc(lambda: mnist_blank_pixels()[0], why="MNIST's training images")),
    Fig("01", "c025", r"(51) of the 108", calc(lambda: mnist_blank_pixels()[1], why="MNIST's training images")),
    Fig("01", "c025", r"of the (108) on the outer ring", calc(lambda: mnist_blank_pixels()[2], why="28·4 - 4")),
    Fig("01", "c025", r"and (16) more", calc(lambda: mnist_blank_pixels()[3], why="MNIST's training images")),
    Fig("01", "c054", r"runs at ([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    Fig("01", "c054", r"each batch still costs\s+about (\d+) µs", Out("01", "c052", r"device path:.*?([\d.]+) us each")),
    # --- 02 ---
    Fig("02", "c000", r"is used (16) times", calc(lambda: 16, why="16×16 tiles")),
    Fig("02", "c011", r"now reused (16) times", calc(lambda: 16, why="16×16 tiles")),
    Fig("02", "c027", r"is reused (16) times from shared", calc(lambda: 16, why="16×16 tiles")),
    Fig("02", "c000", r"\(([\d.]+) MFLOP\)", calc(lambda: 2 * 64 * 784 * 128 / 1e6, why="2·B·784·H")),
    Fig("02", "c011", r"\(the GPU's HBM:\s+([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    Fig("02", "c011", r"some (20)× lower latency", Spec("smem_over_global_latency")),
    Fig("02", "c011", r"load from DRAM at about (\d+) ns", Json(FUSED, "latency_probe.dram_ns"), tol=0.01),
    Fig("02", "c024", r"about\s+(67) TFLOP/s in plain FP32", Spec("h200_fp32_tflops")),
    Fig("02", "c024", r"cuBLAS reaches about (\d+) TFLOP/s", LADDER_TF("cuBLAS")),
    Fig("02", "c024", r"about (495) TFLOP/s in TF32", Spec("h200_tf32_dense_tflops"), tol=0.01),
    Fig("02", "c027", r"far smaller than (8)×", calc(lambda: 32 / 4, why="32 sectors instead of 4")),
    Fig("02", "c027", r"([\d.]+) MFLOP would take", calc(lambda: 2 * 64 * 784 * 128 / 1e6, why="2·B·784·H")),
    Fig("02", "c027", r"the ~(\d+) µs it costs Python", Qty("launch with 3 arrays, µs"), tol=0.1),
    # --- 03 ---
    Fig("03", "c016", r"\(every (5) ms by default\)", calc(lambda: sys.getswitchinterval() * 1e3,
                                                           why="sys.getswitchinterval()")),
    Fig("03", "c033", r"about (10)% accuracy", calc(lambda: 100 / 10, why="one class in ten")),
    Fig("03", "c040", r"the H200's ([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    # --- 05 ---
    Fig("05", "c026", r"about \*\*(\d+)\s+µs\*\*",
        Out("05", "c024", r"the bare launch, no argument checks\s+([\d.]+) us")),
    Fig("05", "c026", r"= 1.2 MB, about ([\d.]+) µs",
        calc(lambda hbm: PARAMS * 12 / (hbm * 1e12) * 1e6, Spec("h200_hbm_tbs"), why="12 bytes per parameter")),
    Fig("05", "c026", r"about [\d.]+ µs at the H200's ([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    Fig("05", "c026", r"12 bytes per parameter at ([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    Fig("05", "c029", r"that is (2)% per step", calc(lambda: 100 * 2 / 100, why="1 - (1 - 2/100)")),
    Fig("05", "c049", r"(100) times steeper", calc(lambda: 100 / 1, why="the curvatures 100 and 1")),
    Fig("05", "c049", r"\(([\d.]+)% closer per step\)", calc(lambda: 100 * 0.019 * 1, why="lr · smallest curvature")),
    # --- 06 ---
    Fig("06", "c016", r"test accuracy as this loop did there, (0\.\d+)", Json(BENCH, "rows[impl=pytorch_eager].test_acc")),
    Fig("06", "c016", r"test accuracy as this loop did there, (0\.\d+)",
        Out("06", "c017", r"epoch  3 .*?test accuracy (0\.\d+)")),
    Fig("06", "c016", r"takes about ([\d.]+) s per epoch\.", Qty("PyTorch eager epoch, ms", 1e-3)),
    Fig("06", "c020", r"about ([\d.]+) % test accuracy",
        calc(lambda a: 100 * a, Out("06", "c022", r"test accuracy: ([\d.]+)"))),
    Fig("06", "c020", r"against ([\d.]+) % for plain SGD",
        calc(lambda a: 100 * a, Out("06", "c019", r"test accuracy: ([\d.]+)"))),
    Fig("06", "c028", r"At ~(\d+) µs per", Qty("launch with 3 arrays, µs"), tol=0.05),
    Fig("06", "c028", r"~([\d.]+) ms per step", calc(lambda us: 15 * us / 1e3, LAUNCH_3, why="15 launches")),
    Fig("06", "c028", r"~([\d.]+) s of the", calc(lambda us: STEPS * 15 * us / 1e6, LAUNCH_3, why="937 steps")),
    Fig("06", "c028", r"of the ([\d.]+) s an epoch", PLAIN_EPOCH_06),
    Fig("06", "c030", r"ends at ([\d.]+) % test",
        calc(lambda a: 100 * a, Out("06", "c031", r"Fashion-MNIST test accuracy: ([\d.]+)"))),
    # --- 07 ---
    Fig("07", "c009", r"curvature (25) times smaller", Out("07", "c004", r"ratio (\d+)")),
    Fig("07", "c009", r"step there is (25) times too short", Out("07", "c004", r"ratio (\d+)")),
    Fig("07", "c009", r"up to (10)× the step", calc(lambda: 1 / (1 - 0.9), why="1 / (1 - mu)")),
    Fig("07", "c052", r"\\approx\$ (81) %", calc(lambda: 100 * 8 / math.pi ** 2, why="8/pi^2")),
    Fig("07", "c052", r"\\approx\$ (9) %", calc(lambda: 100 * 8 / (9 * math.pi ** 2), why="8/(9 pi^2)")),
    Fig("07", "c052", r"the paper's (61) %", calc(lambda: 100 * 6 / math.pi ** 2, why="6/pi^2")),
    Fig("07", "c052", r"the paper's 61 % and (15) %", calc(lambda: 100 * 6 / (4 * math.pi ** 2), why="6/(4 pi^2)")),
    # --- 08 ---
    Fig("11", "f000", r"a training loop (\d+)× faster", Qty("fused speed-up over the plain loop, ×")),
    Fig("11", "f000", r"and (\d+)× faster than\s+that loop recorded", calc(lambda g, f: g / f, Json(BENCH, "rows[impl=course_plain_graph].epoch_s"), FUSED_S)),
    Fig("08", "c000", r"in about ([\d.]+) s per epoch on an H100", Qty("plain epoch, ms", 1e-3)),
    Fig("08", "c000", r"as it comes \(([\d.]+) s per epoch\)", Qty("PyTorch eager epoch, ms", 1e-3)),
    Fig("08", "c000", r"about (\d+) GFLOP of useful", Out("08", "c019", r"epoch: ([\d.]+) GFLOP"), tol=0.02),
    Fig("08", "c000", r"rule of thumb says ([\d.]+) GFLOP", Out("08", "c019", r"6·P·N: ([\d.]+)\)")),
    Fig("08", "c008", r"about (\d+) µs with no argument", LAUNCH_0),
    Fig("08", "c008", r"and (\d+) µs with three arrays", Qty("launch with 3 arrays, µs")),
    Fig("08", "c008", r"cost, about ([\d.]+) ms per step",
        calc(lambda us: 15 * us / 1e3, LAUNCH_3, why="15 launches")),
    Fig("08", "c008", r"about\s+([\d.]+) s of an epoch",
        calc(lambda us: STEPS * 15 * us / 1e6, LAUNCH_3, why="937 steps")),
    Fig("08", "c010", r"about (\d+) ms for the tiled v2", Out("08", "c009", r"cuda.synchronize\(\):\s+([\d.]+) ms")),
    Fig("08", "c010", r"at 4096², ([\d.]+) TFLOP/s", calc(lambda ms: 2 * 4096 ** 3 / (ms * 1e-3) / 1e12,
        Out("08", "c009", r"cuda.synchronize\(\):\s+([\d.]+) ms"))),
    Fig("08", "c018", r"busy for (\d+) µs", Out("08", "c015", r"sum of kernels\s+([\d.]+) µs")),
    Fig("08", "c018", r"a plain step takes (\d+) µs", Qty("plain step, µs")),
    Fig("08", "c018", r"\((\d+) ms an\s+epoch\)", Qty("plain epoch, ms")),
    Fig("08", "c018", r"about (\d+) µs of the step per launch", calc(lambda us: us / 15, Qty("plain step, µs"), why="the step / 15")),
    Fig("08", "c020", r"fixed cost, (937) times", calc(lambda: STEPS, why="60,000 // 64")),
    Fig("15", "c020b", r"global memory is used (16) times", calc(lambda: 16, why="16×16 tiles")),
    Fig("08", "c020", r"about ([\d.]+) ms of arithmetic", FP32_MS, tol=0.1),
    Fig("08", "c020", r"take about ([\d.]+) ms", calc(lambda hbm: MB_IMAGES / (hbm * 1e12) * 1e3, Spec("h200_hbm_tbs"),
                                                       why="188 MB of images at HBM bandwidth")),
    Fig("08", "c020", r"a launch of\s+~(\d+) µs from Python", Qty("launch with 3 arrays, µs")),
    Fig("08", "c020", r"both at an H200's ([\d.]+) TB/s", Spec("h200_hbm_tbs")),
    Fig("08", "c020", r"an H100's ([\d.]+) TB/s makes", Spec("h100_hbm_tbs")),
    Fig("12", "k_q5", r"an epoch has (\d+) times fewer", calc(lambda: 1024 / 64, why="batch 1024 against 64")),
    Fig("08", "c020", r"the ([\d.]+) ms above adds", Out("08", "c019", r"at HBM bandwidth: ([\d.]+) ms")),
    Fig("15", "c020b", r"v1 runs at ([\d.]+) TFLOP/s at 4096²", LADDER_TF("v1 naive")),
    Fig("15", "c020b", r"used 16 times, at\s+([\d.]+) TFLOP/s", LADDER_TF("v2 tiled")),
    Fig("15", "c020b", r"confirms: (\d+) registers per thread", Ptxas("course.matmul:matmul_v3_kernel")),
    Fig("15", "c020b", r"registers per thread, (\d+) bytes spilled",
        Ptxas("course.matmul:matmul_v3_kernel", field="spill")),
    Fig("15", "c030", r"each global load (128) times", calc(lambda: 128, why="128×128 tiles")),
    Fig("15", "c030", r"product is (13) MFLOP", calc(lambda: 2 * 64 * 784 * 128 / 1e6, why="2·64·784·128")),
    Fig("15", "c030", r"about\s+(67) TFLOP/s", Spec("h200_fp32_tflops")),
    Fig("15", "c030", r"reach about (495) TFLOP/s in TF32", Spec("h200_tf32_dense_tflops"), tol=0.01),
    # --- notebook 08: the fused kernel's versions (results/fused-h200.json) and the CUDA graphs ---
    Fig("15", "c030", r"19 and ([\d.]+) TFLOP/s for v1-v5", Json(BENCH, "matmul[impl=v5].tflops")),
    # the ladder's row at 4096² (no unit after the first four: the scan does not see them, these entries check them)
    Fig("15", "c030", r"about ([\d.]+), [\d.]+, [\d.]+, [\d.]+ and [\d.]+ TFLOP/s for v1-v5", Json(BENCH, "matmul[impl=v1].tflops")),
    Fig("15", "c030", r"about [\d.]+, ([\d.]+), [\d.]+, [\d.]+ and [\d.]+ TFLOP/s for v1-v5", Json(BENCH, "matmul[impl=v2].tflops")),
    Fig("15", "c030", r"about [\d.]+, [\d.]+, ([\d.]+), [\d.]+ and [\d.]+ TFLOP/s for v1-v5", Json(BENCH, "matmul[impl=v3].tflops")),
    Fig("15", "c030", r"about [\d.]+, [\d.]+, [\d.]+, ([\d.]+) and [\d.]+ TFLOP/s for v1-v5", Json(BENCH, "matmul[impl=v4].tflops")),
    Fig("15", "c030", r"about (\d+) for cuBLAS", LADDER_TF("cuBLAS"), tol=0.02),
    Fig("08", "cg10", r"runs about \*\*(\d+) times faster", calc(lambda p, g: p / g,
        Json(BENCH, "rows[impl=course_plain].epoch_s"), Json(BENCH, "rows[impl=course_plain_graph].epoch_s")), tol=0.05),
    Fig("08", "cg10", r"made the plain loop (\d+) times faster", calc(lambda r: 1 / r, GRAPH_REPLAY_RATIO_08)),
    Fig("08", "cg10", r"A replayed step \((\d+) µs:", Qty("plain graph step, µs")),
    Fig("08", "cg10", r"µs: (\d+) ms over 937 steps", Qty("plain graph epoch, ms")),
    Fig("08", "cg10", r"sum of bars \((\d+) µs\)", Out("08", "c015", r"sum of kernels\s+([\d.]+) µs")),
    Fig("08", "cg10", r"almost nothing read about (\d+) µs", Out("08", "c015", r"zero loss\s+([\d.]+) µs")),
    Fig("08", "cg10", r"What is left,\s+(\d+) ms against", Qty("plain graph epoch, ms")),
    Fig("10", "p000", r"the plain loop from about (\d+) to \d+ ms", Qty("plain epoch, ms")),
    Fig("10", "p000", r"the plain loop from about \d+ to (\d+) ms", Qty("plain graph epoch, ms")),
    Fig("11", "f000", r"trains an epoch in about (\d+) ms", Qty("fused epoch, ms")),
    Fig("08", "cg10", r"\| 15 → 1 \| about (\d+) \|", Qty("plain epoch, ms")),
    Fig("08", "cg10", r"\| 15 → 1 \| about \d+ \| \*\*about (\d+)\*\*", Qty("plain graph epoch, ms")),
    Fig("08", "cg10", r"\| not counted → 1 \| about (\d+) \(eager\)", Qty("PyTorch eager epoch, ms"), tol=0.01),
    Fig("08", "cg10", r"\(eager\) \| about (\d+) \|", calc(lambda s: s * 1e3, Json(BENCH, "rows[impl=pytorch_graph].epoch_s"))),
    # --- 08 section 6: the batch-size sweep (results/scaling-*.json) ---
    Fig("14", "sc3", r"graph takes (\d+) µs at batch 256", STEP_US("course_plain_graph", 256)),
    Fig("14", "sc3", r"about (\d+) times faster than both", calc(lambda a, b: min(a, b),
        calc(lambda g, f: g / f, EPOCH_MS("course_plain_graph", 64), EPOCH_MS("course_fused", 64)),
        calc(lambda g, f: g / f, EPOCH_MS("pytorch_graph", 64), EPOCH_MS("course_fused", 64))), tol=0.05),
    Fig("14", "sc3", r"to ([\d.]+) ms at batch 4096", EPOCH_MS("pytorch_graph", 4096)),
    Fig("14", "sc3", r"its epoch takes ([\d.]+) ms at batch 1024", EPOCH_MS("course_fused", 1024)),
    # --- 14 section 3: the race (results/race-<gpu>.json) ---
    Fig("14", "rc1", r"time to ([\d.]+) % test accuracy", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig("14", "q000", r"wall time to ([\d.]+) % test accuracy", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig("14", "rc1", r"first evaluation at ([\d.]+) % or more", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig("14", "rc1", r"over the first (\d+) % of them", calc(lambda: _race_tool().WARMUP * 100,
        why="course/tools/race.py WARMUP")),
    Fig("14", "rc1", r"a run stops past (\d+) times its side's", calc(lambda: _race_tool().STOP,
        why="course/tools/race.py STOP")),
    Fig("14", "rc3", r"reaches ([\d.]+) % in a median", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig("14", "rc3", r"in a median ([\d.]+) ms", calc(lambda s: s * 1e3, RACE_BEST("course_"))),
    Fig("14", "rc3", r"fastest graph in ([\d.]+) ms", calc(lambda s: s * 1e3, RACE_BEST("pytorch_"))),
    Fig("14", "rc3", r"([\d.]+) times sooner\.", calc(lambda a, b: b / a, RACE_BEST("course_"), RACE_BEST("pytorch_"))),
    Fig("14", "rc3", r"PyTorch's batch 512 took ([\d.]+) ms", RACE_ROW("pytorch_graph", 512)),
    Fig("14", "rc3", r"best at batch 64 took ([\d.]+) ms", RACE_ROW("course_fused", 64)),
    Fig("14", "rc3", r"at 256 ([\d.]+) ms", RACE_ROW("course_fused", 256)),
    Fig("14", "rc3", r"\(([\d.]+) ms at batch 1024, staged", EPOCH_MS("course_fused", 1024)),
    Fig("14", "rc3", r"graphed epoch falls\nto ([\d.]+) ms at batch 1024", EPOCH_MS("pytorch_graph", 1024)),
    Fig(README, "", r"PyTorch's batch 512 took ([\d.]+) ms", RACE_ROW("pytorch_graph", 512)),
    Fig(README, "", r"its epoch gets no\s+cheaper \(([\d.]+) ms at batch 1024", EPOCH_MS("course_fused", 1024)),
    Fig(README, "", r"graphed epoch falls to ([\d.]+) ms", EPOCH_MS("pytorch_graph", 1024)),
    Fig(README, "", r"and to ([\d.]+) ms at batch 4096", EPOCH_MS("pytorch_graph", 4096)),
    Fig(README, "", r"best at batch 64 took ([\d.]+) ms", RACE_ROW("course_fused", 64)),
    Fig(README, "", r"at 256 ([\d.]+) ms", RACE_ROW("course_fused", 256)),
    # --- simulator and tool settings (no GPU run) ---
    Fig("07", "c019", r"about (85) % test accuracy", calc(lambda: 85, why="tests/test_student_notebooks.py asserts >= 0.85")),
    Fig(README, "", r"the race to ([\d.]+) % test accuracy", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig(README, "", r"outside the clock\) at ([\d.]+) % test", calc(lambda t: t * 100, Json(RACE, "target"))),
    Fig(README, "", r"got there in ([\d.]+) ms", calc(lambda s: s * 1e3, RACE_BEST("course_"))),
    Fig(README, "", r"CUDA graph in ([\d.]+) ms", calc(lambda s: s * 1e3, RACE_BEST("pytorch_"))),
    Fig(README, "", r"([\d.]+) times later", calc(lambda a, b: b / a, RACE_BEST("course_"), RACE_BEST("pytorch_"))),
    Fig(README, "", r"the measured lead is ([\d.]+)x", calc(lambda a, b: b / a, RACE_BEST("course_"),
        RACE_BEST("pytorch_"))),
    Fig(README, "", r"at least (85) % test accuracy", calc(lambda: 85, why="tests/test_student_notebooks.py asserts it")),
    Fig(README, "", r"nbgrader's (30) s per-cell limit", calc(lambda: 30, why="nbgrader's ExecutePreprocessor default")),
    Fig(README, "", r"per-cell limit to (600) s", calc(lambda: _nbgrader_timeout(), why="teachers/nbgrader_config.py")),
    # --- README ---
    Fig(README, "", r"an epoch in ([\d.]+) ms there against", Json("fused-t4grid-h200.json", "epochs.epoch.epoch_ms")),
    Fig(README, "", r"against ([\d.]+) ms on the H200's own 132 blocks",
        Json("fused-t4grid-h200.json", "epoch_ms_own_grid_no_tma.epoch_ms")),
    Fig(README, "", r"trains an epoch in about ([\d.]+) ms", Qty("fused epoch, ms")),
    Fig(README, "", r"(\d+) ms for PyTorch eager", Qty("PyTorch eager epoch, ms")),
    Fig(README, "", r"against (\d+) ms for PyTorch's CUDA graph", calc(lambda s: s * 1e3,
        Json(BENCH, "rows[impl=pytorch_graph].epoch_s"))),
    Fig(README, "", r"the plain loop drops from (\d+) ms", Qty("plain epoch, ms")),
    Fig(README, "", r"ms to (\d+) ms per epoch when its launches", Qty("plain graph epoch, ms")),
    # --- 08-12 after the splits ---
    Fig("08", "c010", r"peaks at about (\d+) GB/s", Out("08", "c011", r"16384 KiB\s+host → device:\s+[\d.]+ µs \(\s*([\d.]+) GB/s")),
    Fig("15", "cm1", r"load from DRAM takes about (\d+) ns", Json(FUSED, "latency_probe.dram_ns"), tol=0.01),
    Fig("10", "p_t2", r"take about (\d+) % off the step", calc(lambda m: 100 * (1 - m), MERGED_RATIO_10),
        tol=0.05),
    Fig("10", "p_t2", r"benchmark, (\d+) ms an epoch", Qty("plain epoch, ms")),
    Fig("10", "p_bw2", r"takes about\s+([\d.]+) µs", Out("10", "p_bwr", r"grid_barrier .*?([\d.]+) µs a round")),
    Fig("10", "p_bw2", r"against ~(\d+) µs for a launch", Qty("launch with 3 arrays, µs")),
    Fig("11", "c038c", r"an \*\*occupancy\*\* of (\d+) %", calc(lambda w: 100 * 16 / w, Spec("sm_max_warps"))),
    Fig("11", "f_end", r"block_smem\(TK, CHUNK\)\)` is (\d+)", calc(lambda: _fused_occupancy()[0], why="course.fused.blocks_per_sm")),
    Fig("11", "f_end", r"all (65,536) of an SM's registers", calc(lambda: _fused_occupancy()[1], why="16 warps x 128 registers x 32 lanes")),
    Fig("11", "f_end", r"its (47,808) bytes", calc(lambda: _fused_occupancy()[2], why="course.fused.block_smem(TK, CHUNK)")),
    Fig("11", "f_end", r"would allow (\d+) blocks", calc(lambda: _fused_occupancy()[3], why="SM_SMEM // (smem + BLOCK_SMEM_RESERVED)")),
    Fig("13", "ck2b", r"advances in ticks of (32) ns", Json(FUSED, "globaltimer.tick_ns")),
    Fig("13", "ck2b", r"multiples of (32) ns\)", Json(FUSED, "globaltimer.tick_ns")),
    Fig(HISTORY, "", r"every phase\s+\(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=39.8].epoch_ms")),
    Fig(HISTORY, "", r"two barriers a step \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=29.9].epoch_ms")),
    Fig(HISTORY, "", r"`range\(t, n, nt\)`: ([\d.]+) → [\d.]+ ms", Json(FUSED, "versions[epoch_ms=23.87].epoch_ms")),
    Fig(HISTORY, "", r"`range\(t, n, nt\)`: [\d.]+ → ([\d.]+) ms", Json(FUSED, "versions[epoch_ms=16.91].epoch_ms")),
    Fig(HISTORY, "", r"constant length \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=16.1].epoch_ms")),
    Fig(HISTORY, "", r"waits for it \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=15.4].epoch_ms")),
    Fig(HISTORY, "", r"`grid_barrier`: ([\d.]+) → [\d.]+ µs", Json(FUSED, "versions[epoch_ms=15.4].clocks_us.barrier1")),
    Fig(HISTORY, "", r"`grid_barrier`: [\d.]+ → ([\d.]+) µs", Json(FUSED, "versions[epoch_ms=14.38].clocks_us.barrier1")),
    Fig(HISTORY, "", r"µs a barrier, ([\d.]+) → [\d.]+ ms", Json(FUSED, "versions[epoch_ms=15.4].epoch_ms")),
    Fig(HISTORY, "", r"µs a barrier, [\d.]+ → ([\d.]+) ms", Json(FUSED, "versions[epoch_ms=14.38].epoch_ms")),
    Fig(HISTORY, "", r"spare blocks \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=13.64].epoch_ms")),
    Fig(HISTORY, "", r"staging X\s+([\d.]+) → [\d.]+ µs", Json(FUSED, FINAL + ".without_copies_clocks_us.a_x")),
    Fig(HISTORY, "", r"staging X\s+[\d.]+ → ([\d.]+) µs", Json(FUSED, FINAL + ".clocks_us.a_x")),
    Fig(HISTORY, "", r"µs, ([\d.]+) → [\d.]+ ms on the same host", Json(FUSED, FINAL + ".without_copies_ms")),
    Fig(HISTORY, "", r"µs, [\d.]+ → ([\d.]+) ms on the same host", Json(FUSED, FINAL + ".epoch_ms")),
    Fig(HISTORY, "", r"the committed kernel, ([\d.]+) ms", Json(FUSED, NOW + ".epoch_ms")),
    Fig(HISTORY, "", r"with the host's share, take about (\d+) ms", Qty("fused epoch, ms")),
    Fig("13", "c062", r"H200's ([\d.]+) GHz", Json(FUSED, "latency_probe.sm_clock_ghz")),
    Fig(HISTORY, "", r"the epoch did not: ([\d.]+) → [\d.]+ ms", Json(FUSED, "versions[epoch_ms=12.22].epoch_ms")),
    Fig(HISTORY, "", r"the epoch did not: [\d.]+ → ([\d.]+) ms", Json(FUSED, "versions[epoch_ms=12.39].epoch_ms")),
    Fig(HISTORY, "", r"in phase A, ([\d.]+) → [\d.]+ ms", Json(FUSED, "versions[epoch_ms=12.39].epoch_ms")),
    Fig(HISTORY, "", r"in phase A, [\d.]+ → ([\d.]+) ms", Json(FUSED, "versions[epoch_ms=9.91].epoch_ms")),
    Fig(HISTORY, "", r"inside the kernel, ([\d.]+) ms", Json(FUSED, "versions[epoch_ms=9.64].epoch_ms")),
    Fig(HISTORY, "", r"does not exist, ([\d.]+) ms", Json(FUSED, NOW + ".epoch_ms")),
    Fig(HISTORY, "", r"row \((\d+) ms an epoch\)", calc(lambda s: s * 1e3, Json(BENCH, "rows[impl=course_fused_step_graph].epoch_s"))),
    Fig(HISTORY, "", r"\| (20.2) \|", Json(FUSED, "versions[epoch_ms=20.18].epoch_ms")),
    Fig(HISTORY, "", r"\| (28.6) \|", Json(FUSED, "versions[epoch_ms=28.61].epoch_ms")),
    Fig(HISTORY, "", r"\| (14.4) \|", Json(FUSED, "versions[epoch_ms=14.37].epoch_ms")),
    Fig(HISTORY, "", r"\| (13.2) \|", Json(FUSED, "versions[epoch_ms=13.2].epoch_ms")),
    Fig(HISTORY, "", r"\| (20.7) \|", Json(FUSED, "versions[epoch_ms=20.75].epoch_ms")),
    Fig(HISTORY, "", r"\| (12.7) \|", Json(FUSED, "versions[epoch_ms=12.7].epoch_ms")),
    Fig("13", "c062", r"own time per step, about (\d+) µs", CLOCK("step")),
    Fig("13", "e_end", r"fused3: (\d+)× faster than fused2", calc(lambda a, b: a / b, FUSED2_MS, FUSED3_MS)),
    # --- 12 section 3: the climb, each rung measured where it is built, the question the next answers ---
    Fig("12", "k_1b", r"a hidden unit per block \(([\d.]+) ms an epoch\)", Json(FUSED, "versions[epoch_ms=20.18].epoch_ms")),
    Fig("12", "k_1b", r"in every\s+block \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=28.61].epoch_ms")),
    Fig("12", "k_1b", r"no phase B \(([\d.]+) ms\)", Json(FUSED, "versions[epoch_ms=14.37].epoch_ms")),
    Fig("12", "k_1b", r"than a barrier's ([\d.]+) µs", Qty("grid barrier in the epoch kernel, µs")),
    Fig("12", "k_q2", r"fused1 takes ([\d.]+) ms an epoch", FUSED1_MS),
    Fig("12", "k_q2", r"an epoch, (\d+) µs a step", calc(lambda ms: ms * 1e3 / STEPS, FUSED1_MS, why="the epoch over its 937 steps")),
    Fig("12", "k_q3", r"fused2 takes ([\d.]+) ms", FUSED2_MS),
    Fig("12", "k_q3", r"about (\d+) µs a launch", calc(lambda f1, f2: (f1 - f2) * 1e3 / STEPS / 2, FUSED1_MS, FUSED2_MS,
        why="fused1's epoch less fused2's, over 937 steps of two launches")),
    Fig("12", "k_q3", r"(17) arrays in five", calc(lambda: 3 + 4 + 4 + 6, why="Batch 3, Weights 4, Acts 4, Steps 6 "
        "(losses, T and Momentum's 4 velocities): course.fused's namedtuples")),
    Fig("12", "k_q3", r"in that run (\d+) % of fused2's step", calc(lambda s, g: 100 * (1 - g / s),
        Json(BENCH, "rows[impl=course_fused_step].epoch_s"), Json(BENCH, "rows[impl=course_fused_step_graph].epoch_s"),
        why="the benchmark's fused step launched one by one less as a CUDA graph, over the former")),
    Fig("14", "c061b", r"recorded as a graph it takes (\d+) % of its", calc(lambda s, g: 100 * g / s,
        Json(BENCH, "rows[impl=course_fused_step].epoch_s"), Json(BENCH, "rows[impl=course_fused_step_graph].epoch_s"))),
    Fig("12", "k_q3", r"its epoch took (\d+) % of the time", calc(lambda s, g: 100 * g / s,
        Json(BENCH, "rows[impl=course_fused_step].epoch_s"), Json(BENCH, "rows[impl=course_fused_step_graph].epoch_s"))),
    Fig("12", "k_r5", r"fused5 at batch 1024 takes ([\d.]+) ms", RUNG_MS("fused5", "k_l5")),
    Fig("12", "k_r5", r"more than fused4's ([\d.]+) ms", RUNG_MS("fused4", "k_l4")),
    Fig("12", "k_r5", r"fused3 at the same batch: ([\d.]+) ms", RUNG_MS("fused3", "k_l5")),
    Fig("12", "k_q4", r"fused3 takes ([\d.]+) ms", FUSED3_MS),
    Fig("12", "k_q4", r"ms, (\d+)× less than fused2", calc(lambda a, b: a / b, FUSED2_MS, FUSED3_MS)),
    Fig("12", "k_q4", r"staging X\[batch, tile\], ([\d.]+) µs", Json(FUSED, NOW + ".without_copies_clocks_us.a_x")),
    Fig("12", "k_q4", r"a step of about (\d+) µs", calc(lambda ms: ms * 1e3 / STEPS, Json(FUSED, NOW + ".without_copies_ms"),
        why="the kernel without the TMA's copies: its epoch over 937 steps")),
    Fig("13", "c062", r"ms for the plain loop, (\d+)×\.", Qty("fused speed-up over the plain loop, ×")),
    Fig("13", "c062", r"the course's reference: ([\d.]+) ms an epoch", Qty("fused epoch, ms")),
    Fig("13", "c062", r"an epoch against (\d+) ms for the plain loop", Qty("plain epoch, ms")),
    Fig("13", "c062", r"\(the\s+benchmark's ([\d.]+) ms\)", Qty("fused epoch, ms")),
    Fig("13", "c062", r"\(([\d.]+) ms of FP32 arithmetic", FP32_MS),
    Fig("13", "c062", r"about (\d+) times above it", calc(lambda f, a: f / a, Qty("fused epoch, ms"), FP32_MS), tol=0.05),
    Fig("13", "c062", r"split a step into (\d+) parts", calc(lambda: sum(who != "spare" for _, _, who in CLOCK_PARTS.values()), why="course.fused.CLOCK_PARTS on the path")),
    Fig("13", "c062", r"about (\d+) ns from a cache", Json(FUSED, "latency_probe.l2_hit_ns")),
    Fig("13", "c062", r"about (\d+) ns from DRAM", Json(FUSED, "latency_probe.dram_ns"), tol=0.01),
    Fig("13", "c062", r"take about ([\d.]+) µs for 100 multiply-adds", A_FWD),
    Fig("13", "c062", r"of the ([\d,]+) cycles that lasts", calc(lambda us, ghz: us * ghz * 1e3, A_FWD,
        Json(FUSED, "latency_probe.sm_clock_ghz"), why="phase A's sums at the SM clock"), tol=0.05),
    Fig("13", "c062", r"\((1,875) per epoch", calc(lambda: 2 * STEPS + 1, why="two barriers a step and one after the first gather (course.fused.fused_steps_kernel)")),
    Fig("13", "c062", r"first gather\), about ([\d.]+) µs each", Qty("grid barrier in the epoch kernel, µs")),
    Fig("13", "c062", r"small part of the (\d+) µs step", CLOCK("step")),
]

# ------------------------------------------------------------------------------------------------------------------
# Reading the prose
# ------------------------------------------------------------------------------------------------------------------

UNITS = r"(?:[ \u00a0\n]?(?:ms|µs|us|ns|TFLOP/s|GFLOP/s|GFLOP|MFLOP|GB/s|TB/s|%)|[ \u00a0\n](?:s|times))"
NUM = r"\d[\d,]*(?:\.\d+)?"
FIGURE_RE = re.compile(  # a number (or a range a-b) and a unit; "19×" / "19x" only when attached to the number
    rf"(?<![\w.,])(?:{NUM}(?:\s?[-–]\s?{NUM})?{UNITS}(?![\w/])|{NUM}[×x](?![\w\d]))")


def prose():
    """[(where, cell id, markdown text)] for every notebook's markdown cells, README.md and fused-history.md."""
    out = [(where, "", path.read_text(encoding="utf-8")) for where, path in md_files().items()]
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = path.name[:2]
        out += [(nb, c["id"], _src(c)) for c in _cells(nb).values() if c["cell_type"] == "markdown"]
    return out


def prose_text(where, cell):
    if where in md_files():
        return md_files()[where].read_text(encoding="utf-8")
    c = _cells(where)[cell]
    assert c["cell_type"] == "markdown", f"{where} {cell} is not a markdown cell"
    return _src(c)


def locate(fig, text=None):
    """The single match of fig.phrase in its cell (spaces in the phrase match any whitespace)."""
    text = prose_text(fig.where, fig.cell) if text is None else text
    pattern = re.compile(re.sub(r"(?<!\\) ", r"\\s+", fig.phrase))
    found = list(pattern.finditer(text))
    assert len(found) == 1, (f"{where_name(fig.where, fig.cell)}: {fig.phrase!r} matches {len(found)} times "
                             "(it must match once: make the phrase longer, or update the registry)")
    return found[0]


def decimals(written):
    return len(written.split(".")[1]) if "." in written else 0


def agrees(written, value, tol):
    """True when the written figure is the value to the written precision, or within tol (relative)."""
    w = _number(written)
    return abs(w - value) <= 0.5 * 10 ** -decimals(written) * (1 + 1e-9) or abs(w - value) <= tol * abs(value)


def fmt_like(written, value):
    d = decimals(written)
    s = f"{value:,.{d}f}" if "," in written else f"{value:.{d}f}"
    return s


# ------------------------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------------------------

def _id(fig):
    return f"{fig.where}-{fig.cell or 'md'}-{fig.phrase[:40]}"


@pytest.mark.parametrize("fig", FIGURES, ids=[_id(f) for f in FIGURES])
def test_figure_agrees_with_its_source(fig):
    m = locate(fig)
    value = fig.source.value()
    assert agrees(m.group(1), value, fig.tol), (
        f"{where_name(fig.where, fig.cell)}: the prose says {m.group(0)!r} but {fig.source} gives {value:.6g} "
        f"(tolerance: the written precision, or {fig.tol:.0%}). After a re-run on the GPU: "
        "python tests/test_figures.py --update")


def test_every_figure_has_a_source():
    """Each "<number> <unit>" of the prose lies inside the figure of a FIGURES entry: none is quoted unchecked."""
    claimed = {}
    for fig in FIGURES:
        m = locate(fig)
        claimed.setdefault((fig.where, fig.cell), []).append(m.span(1))
    loose = []
    for where, cell, text in prose():
        spans = claimed.get((where, cell), [])
        for m in FIGURE_RE.finditer(text):
            if not any(a < m.end() and m.start() < b for a, b in spans):
                context = text[max(0, m.start() - 50):m.end() + 20].replace("\n", " ")
                loose.append(f"{where_name(where, cell)}: {m.group(0)!r} in '...{context}...'")
    assert not loose, ("figures in the prose with no source in tests/test_figures.py FIGURES (add an entry: the saved "
                       "output or results JSON it comes from, or the arithmetic / data sheet):\n" + "\n".join(loose))


def leaves(source):
    """The measured sources under a source: a Calc's arguments, a Qty's canonical source, recursively."""
    if isinstance(source, Calc):
        return [leaf for a in source.args for leaf in leaves(a)]
    if isinstance(source, Qty):
        return leaves(QUANTITIES[source.name][0])
    return [source]


def run_of(source):
    """Which run a measured source comes from: a cell's saved output, or a results file."""
    if isinstance(source, Out):
        return f"notebook {source.nb} cell {source.cell}"
    return source.file if isinstance(source, Json) else str(source)


def disagreements(quoted):
    """[(a, b)] of quoted figures [(quantity, written, scale, place)] of one quantity that no single value fits:
    each written figure, over its scale, stands for an interval of half its last digit; two that do not overlap
    quote different values."""
    def interval(written, scale):
        half = 0.5 * 10 ** -decimals(written) * (1 + 1e-9)
        return sorted(((_number(written) - half) / scale, (_number(written) + half) / scale))
    out = []
    for i, (qa, wa, sa, pa) in enumerate(quoted):
        for qb, wb, sb, pb in quoted[i + 1:]:
            (lo_a, hi_a), (lo_b, hi_b) = interval(wa, sa), interval(wb, sb)
            if qa == qb and (hi_a < lo_b or hi_b < lo_a):
                out.append((f"{pa}: {wa}", f"{pb}: {wb}"))
    return out


def other_run_problem(fig):
    """Why `fig` may not quote another run of a declared quantity (None if it may): another run appears only inside
    its own table, as a ratio of that run's figures; the prose quotes the canonical figure only."""
    others = {o: name for name, (_, runs) in QUANTITIES.items() for o in runs}
    hit = [others[leaf] for leaf in leaves(fig.source) if leaf in others]
    if not hit or (fig.where, fig.cell) in OTHER_RUN_CELLS_NOT_YET:
        return None
    runs = {run_of(leaf) for leaf in leaves(fig.source)}
    ratio = isinstance(fig.source, Calc) and len(fig.source.args) >= 2
    if len(runs) == 1 and ratio:
        return None
    return (f"{where_name(fig.where, fig.cell)}: {fig.phrase!r} quotes another run of {hit[0]!r} ({', '.join(runs)}); "
            f"quote Qty({hit[0]!r}), or keep that run's figures to a ratio inside its own table")


def test_one_figure_per_quantity():
    """Every FIGURES entry of one declared quantity quotes the same value (the plain step was once 626, 737.5,
    912 and 1,334 µs)."""
    quoted = [(f.source.name, locate(f).group(1), f.source.scale, where_name(f.where, f.cell))
              for f in FIGURES if isinstance(f.source, Qty)]
    assert len({q[0] for q in quoted}) >= 6, "the quantities are declared and quoted"
    assert not disagreements(quoted), f"one quantity, different figures: {disagreements(quoted)}"


def test_quantities_disagree_when_their_figures_do():
    """The check itself: 626 and 737.5 µs of one quantity disagree; 855 ms and 0.86 s, or 913 and 912.96, do not."""
    step, epoch = "plain step, µs", "plain epoch, ms"
    assert disagreements([(step, "626", 1, "08 c018"), (step, "737.5", 1, "08 cg10")])
    assert not disagreements([(epoch, "855", 1, "08"), (epoch, "0.86", 1e-3, "08 c000"), (step, "626", 1, "x")])
    assert not disagreements([(step, "913", 1, "a"), (step, "912.96", 1, "b")])
    assert disagreements([(epoch, "855", 1, "a"), (epoch, "1,003.6", 1, "b")])


def test_other_runs_stay_in_their_own_table():
    """A figure from another run of a declared quantity is a ratio of that run: prose that calls it "this run's" is
    no excuse (08 once quoted its cell's 626 µs step beside the benchmark's 913)."""
    problems = [other_run_problem(f) for f in FIGURES]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)
    sweep_plain, sweep_fused = (Json(SCALING, f"rows[impl={impl},batch_size=64].epoch_s")
                                for impl in ("course_plain", "course_fused"))
    assert other_run_problem(Fig("14", "sc1", r"(1081.9)", sweep_plain))       # the sweep's own plain epoch, bare
    assert other_run_problem(Fig("06", "c030", r"took (\d+) s", PLAIN_EPOCH_06))  # "here" beside the benchmark's
    assert other_run_problem(Fig("14", "sc1", "", calc(lambda p, f: p / f, sweep_plain, sweep_fused))) is None
    assert other_run_problem(Fig("13", "c062", "", calc(lambda p, f: p / f, sweep_plain, FUSED_S)))   # two runs


# Cells that time again a quantity notebook 14's benchmark owns (the plain step and epoch, its graph, the fused
# epoch): their saved blocks print this run's ratios only, so that a student never reads two figures of one quantity.
RETIMING_CELLS = {
    ("08", "c015"): r"whole step\s+[\d.]+ µs",
    ("08", "cg9"): r"µs per step|ms per epoch",
    ("10", "p_tc"): r"µs per step|ms per epoch",
    ("13", "c058"): r"ms per epoch",
}


def test_cells_that_time_the_benchmarks_quantities_again_print_ratios_only():
    """08's step and graph loops, 10's merged loop and 13's training print this run's ratios, not a second µs or ms
    of the plain step or the fused epoch (the saved blocks once showed 764, 826, 1,128 and 913 µs of one step)."""
    absolute = [f"{nb} {cell}: {m.group(0)!r}" for (nb, cell), pattern in RETIMING_CELLS.items()
                for m in [re.search(pattern, output_text(nb, cell))] if m]
    assert not absolute, "a cell prints another run's absolute figure of a benchmark quantity: " + ", ".join(absolute)
    assert all(output_text(nb, cell) for nb, cell in RETIMING_CELLS), "each cell has a saved GPU block"
    assert re.search(RETIMING_CELLS[("08", "cg9")], "plain (15 launches/step)   826.4 µs per step")   # the old block


def test_the_scan_sees_figures():
    """The scan finds the forms the prose uses, and leaves sizes and products like 41 × 41 alone."""
    text = ("about 41 ms, 0.4-0.5 ms, 19× faster, 25x, 97.5 %, 7.7 TFLOP/s, 18 times; "
            "41 × 41 grid, 6s and 9s, 128-byte")
    assert [m.group(0) for m in FIGURE_RE.finditer(text)] == [
        "41 ms", "0.4-0.5 ms", "19×", "25x", "97.5 %", "7.7 TFLOP/s", "18 times"]


def test_a_wrong_figure_fails():
    """A figure that drifted from its source fails; one written to its precision passes."""
    assert agrees("41", 40.66, 0) and agrees("0.79", 0.7949, 0) and agrees("1,873", 1873, 0)
    assert not agrees("40", 19.4, 0) and not agrees("18", 19.4, 0) and not agrees("0.6", 0.79, 0.1)
    assert agrees("25", 26.1, 0.1) and not agrees("27", 23.7, 0.1)


def test_sources_resolve():
    """The source kinds read what they say: a cell's output by id, a JSON key by selector."""
    assert Out("08", "c016", r"launches per plain step: (\d+)").value() == 15
    assert Json(BENCH, "config.batch_size").value() == 64
    with pytest.raises(AssertionError):
        Json(BENCH, "rows[impl=no_such_row].epoch_s").value()
    with pytest.raises(AssertionError):
        Out("08", "c016", r"no such text (\d+)").value()


def test_update_rewrites_a_drifted_figure(tmp_path, monkeypatch):
    """--update puts a figure that drifted back to its source's value and leaves every other byte alone."""
    mod = sys.modules[__name__]
    shutil.copytree(NOTEBOOKS, tmp_path / "notebooks", ignore=shutil.ignore_patterns("exercises"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(mod, "RESULTS", tmp_path / "notebooks" / "results")
    monkeypatch.setattr(mod, "FIGURES", [f for f in FIGURES if not isinstance(f.source, Ptxas)])
    _cells.cache_clear()
    try:
        path = _nb_path("11")
        good = path.read_text(encoding="utf-8")
        title = locate(FIGURES[[f.phrase for f in FIGURES].index(r"a training loop (\d+)× faster")])
        wrong = good.replace(f"a training loop {title.group(1)}× faster", "a training loop 40× faster")
        assert wrong != good
        path.write_text(wrong, encoding="utf-8")
        readme = (tmp_path / "README.md").read_text(encoding="utf-8")
        history = (tmp_path / "notebooks" / "results" / "fused-history.md").read_text(encoding="utf-8")
        _cells.cache_clear()
        assert update() == 1
        assert path.read_text(encoding="utf-8") == good
        assert (tmp_path / "README.md").read_text(encoding="utf-8") == readme
        assert (tmp_path / "notebooks" / "results" / "fused-history.md").read_text(encoding="utf-8") == history
    finally:
        _cells.cache_clear()


# ------------------------------------------------------------------------------------------------------------------
# --update: rewrite drifted figures from their sources
# ------------------------------------------------------------------------------------------------------------------

def update():
    """Rewrite each figure that left its tolerance; print what changed. Returns the number of changes."""
    from course.tools.nbtools import dumps
    changes = 0
    by_file = {}
    for fig in FIGURES:
        by_file.setdefault(fig.where, []).append(fig)
    for where, figs in by_file.items():
        if where in md_files():
            texts = {"": md_files()[where].read_text(encoding="utf-8")}
        else:
            nb = json.loads(_nb_path(where).read_text(encoding="utf-8"))
            cells = {c["id"]: c for c in nb["cells"]}
            texts = {f.cell: _src(cells[f.cell]) for f in figs}
        for fig in figs:
            text = texts[fig.cell]
            m = locate(fig, text)
            value = fig.source.value()
            if agrees(m.group(1), value, fig.tol):
                continue
            new = fmt_like(m.group(1), value)
            print(f"{where_name(where, fig.cell)}: {m.group(0)!r}: {m.group(1)} -> {new}  ({fig.source})")
            texts[fig.cell] = text[:m.start(1)] + new + text[m.end(1):]
            changes += 1
        if where in md_files():
            md_files()[where].write_text(texts[""], encoding="utf-8")
        else:
            for cid, text in texts.items():
                cells[cid]["source"] = text.splitlines(keepends=True)
            _nb_path(where).write_text(dumps(nb), encoding="utf-8")
    _cells.cache_clear()
    return changes


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_figures.py --update   (checking: pytest tests/test_figures.py)")
    sys.path.insert(0, str(ROOT))
    n = update()
    print(f"{n} figure(s) rewritten" + ("; now run python -m course exercises, and read the sentences" if n else ""))


def test_the_race_defines_the_graph_modes_its_output_names():
    """14 rc2's saved output names PyTorch's graph modes per batch size: rc1's prose defines each one it names."""
    line = re.search(r"faster way per batch size: (.+)", output_text("14", "rc2")).group(1)
    modes = {pair.split()[1] for pair in line.split(", ")}
    assert modes == {"step", "interval"}, line
    missing = [m for m in modes if f"`{m}`: " not in prose_text("14", "rc1")]
    assert not missing, f"14 rc1 does not define the graph modes {missing} that rc2's output names"
