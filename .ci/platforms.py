"""Other platforms, checked from Linux: requirements.txt resolved for each (uv, no install), then the Mac's numba
packages installed here and the simulator tests run on them.

    python .ci/platforms.py resolve   # macOS arm64 and x86_64, Windows, Linux aarch64: each resolves, right numba-cuda
    python .ci/platforms.py mac       # the numba, numba-cuda, llvmlite and numpy a Mac gets, in a venv here: tests

`pip download --platform` evaluates environment markers for the machine it runs on, not the target; `uv pip
compile --python-platform` evaluates them for the target. Run from the CI venv (it imports course.runtime.device)."""
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAC = {"macOS arm64": "aarch64-apple-darwin", "macOS x86_64": "x86_64-apple-darwin"}
OTHERS = {"Windows": "x86_64-pc-windows-msvc", "Linux aarch64": "aarch64-unknown-linux-gnu"}
HERE = "%d.%d" % sys.version_info[:2]  # the Mac sets are resolved for this Python, and installed here
PYTHONS = sorted({"3.10", "3.12", "3.14", HERE}, key=lambda v: tuple(map(int, v.split("."))))  # oldest, common, newest
NUMBA = ["numba", "numba-cuda", "llvmlite", "numpy"]  # what makes the Mac's simulator: taken as resolved for it
TOOLS = ["pytest", "pytest-xdist", "nbval", "ipykernel", "nbformat", "nbclient", "matplotlib", "tqdm"]  # its tests
# The simulator tests run on each Mac set, chosen by file and name (the test files change; their names do not), as
# three pytest runs, two at a time (-n 0: no xdist workers; the simulator keeps one core busy). What only this step
# proves: the course on the Mac's numba-cuda 0.20.1 and numba. arm64 (most Macs): every exercise check accepts its
# solution, and the simulator instruments ("eyes") catch what they catch, in that simulator (the planted wrong answers
# run once, in `pytest`: telling one apart is NumPy's comparison, the same here); the device patches, the
# scale/gather kernel tests and notebook 01 (.ci/colab.py runs 06 on Colab's set; `pytest` runs every notebook).
# x86_64 (an older numba): the device patches and kernels.
CHECKS_PASS = "solutions_pass or solution_passes or eyes"  # test_checks_*.py's test_solution(s)_pass(es), _eyes.py
RUNS = [("macOS arm64", ["tests/test_checks*.py"], ["-k", CHECKS_PASS]),
        ("macOS arm64", ["tests/test_device.py", "tests/test_kernels.py", "notebooks/01_data.ipynb"], []),
        ("macOS x86_64", ["tests/test_device.py", "tests/test_kernels.py"], [])]

def sh(*cmd, **kw):
    """Run a command from the repository root, echoing it; fail CI when it fails."""
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), cwd=ROOT, check=True, **kw)


def uv(tmp):
    """uv, installed into its own venv (it is not a course requirement)."""
    venv = tmp / "uv"
    if not (venv / "bin" / "uv").exists():
        sh(sys.executable, "-m", "venv", venv)
        sh(venv / "bin" / "pip", "install", "-q", "uv")
    return venv / "bin" / "uv"


def resolve(tmp, target, python):
    """requirements.txt resolved for a target triple: {name: version}, wheels only, no pre-releases (as pip)."""
    out = tmp / f"{target}-{python}.txt"
    sh(uv(tmp), "pip", "compile", "requirements.txt", "--python-platform", target, "--python-version", python,
       "--only-binary", ":all:", "--prerelease", "disallow", "--quiet",
       "--no-header", "--no-annotate", "-o", out,
       "--python", sys.executable, "--no-python-downloads")  # this interpreter builds `-e .`; fetch none
    return dict(m.groups() for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", out.read_text(), re.M))


def check(name, pins):
    """The numba-cuda a platform gets is one course/runtime/device.py was written for; simulator-only on macOS only."""
    from course.runtime import device
    nc = pins.get("numba-cuda")
    problems = []
    if nc not in device.WRITTEN_FOR["numba-cuda"]:
        problems.append(f"numba-cuda {nc} is not in course.runtime.device.WRITTEN_FOR")
    if (nc in device.SIMULATOR_ONLY) != name.startswith("macOS"):
        problems.append(f"numba-cuda {nc} on {name}: simulator-only builds are for macOS, and only there")
    if name.startswith("macOS") and any(p.startswith(("cuda-bindings", "nvidia-")) for p in pins):
        problems.append("CUDA wheels resolved for macOS")
    from course.runtime import versions
    for pkg in versions.RANGES:  # numba and numpy inside the ranges `import course` checks (numpy < 2.5, numba < 0.69)
        line = versions.range_problem(pkg, pins.get(pkg, "0"))
        if line:
            problems.append(line)
    summary = ", ".join(f"{p} {pins.get(p)}" for p in NUMBA)
    print(f"{'ok  ' if not problems else 'FAIL'} {name}: {summary}" + "".join(f"\n     {p}" for p in problems))
    return not problems


def cmd_resolve(tmp):
    from course.runtime import versions
    ok = True
    for python in PYTHONS:
        for name, target in {**MAC, **OTHERS}.items():
            if name == "macOS x86_64" and versions.version_tuple(python) > versions.PYTHON_INTEL_MAC:
                continue  # README: an Intel Mac runs Python 3.10 to 3.13
            ok &= check(f"{name} (Python {python})", resolve(tmp, target, python))
    return 0 if ok else 1


def cmd_mac(tmp):
    python = {}
    for name, target in MAC.items():  # a venv with the Mac's numba, numba-cuda, llvmlite, numpy (and test tools)
        pins = resolve(tmp, target, HERE)
        venv = tmp / target
        sh(uv(tmp), "venv", "-q", "--python", sys.executable, "--no-python-downloads", venv)
        python[name] = venv / "bin" / "python"
        sh(uv(tmp), "pip", "install", "-q", "--python", python[name], *(f"{p}=={pins[p]}" for p in NUMBA + TOOLS),
           "-e", ".")
        got = subprocess.run([python[name], "-c", "import course.runtime.device as d; print(*d.cuda_build())"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        assert got == ["numba-cuda", pins["numba-cuda"]], f"{name}: the venv has {got}"
        print(f"{name}: {', '.join(f'{p} {pins[p]}' for p in NUMBA)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM", "PYTHONPATH")}
    queue, running, failed = list(enumerate(RUNS)), [], 0
    while queue or running:
        while queue and len(running) < 2:
            i, (name, patterns, args) = queue.pop(0)
            files = [str(f.relative_to(ROOT)) for p in patterns for f in sorted(ROOT.glob(p))]
            log = open(tmp / f"run{i}.log", "w+")
            cmd = [python[name], "-m", "pytest", "-q", "-n", "0", *args, *files]
            running.append((name, cmd, log, time.monotonic(),
                            subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
        time.sleep(1)
        for r in [r for r in running if r[-1].poll() is not None]:
            running.remove(r)
            name, cmd, log, t0, proc = r
            log.seek(0)
            print(f"+ {' '.join(map(str, cmd))}  # {name}, {time.monotonic() - t0:.0f} s\n{log.read()}", flush=True)
            failed += proc.returncode != 0
    return 1 if failed else 0

def main():
    what = sys.argv[1:] or ["resolve", "mac"]
    with tempfile.TemporaryDirectory() as tmp:
        for w in what:
            if {"resolve": cmd_resolve, "mac": cmd_mac}[w](Path(tmp)):
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
