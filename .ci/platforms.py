"""Other platforms, checked from Linux: requirements.txt resolved for each (uv, no install), then the Mac's numba
packages installed here and the simulator tests run on them.

    python .ci/platforms.py resolve   # macOS arm64 and x86_64, Windows, Linux aarch64: each resolves, right numba-cuda
    python .ci/platforms.py mac       # the numba, numba-cuda, llvmlite and numpy a Mac gets, in a venv here: tests

`pip download --platform` evaluates environment markers for the machine it runs on, not the target; `uv pip
compile --python-platform` evaluates them for the target. Run from the CI venv (it imports course.device)."""
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
PYTHONS = ["3.10", "3.12", "%d.%d" % sys.version_info[:2]]  # oldest supported, the issue's, this CI's
NUMBA = ["numba", "numba-cuda", "llvmlite", "numpy"]  # what makes the Mac's simulator: taken as resolved for it
TOOLS = ["pytest", "nbval", "ipykernel", "nbformat", "nbclient", "matplotlib", "tqdm"]  # to run its tests
# The simulator tests run on each Mac set, chosen by file (the test files change; their names do not). arm64 (most
# Macs): the exercise checks' planted-answer tests (with the simulator instruments), the device patches, the
# scale/gather kernel tests, and notebooks 01 and 06. x86_64 (an older numba): the device patches and kernels.
TESTS = {"macOS arm64": ["tests/test_device.py", "tests/test_kernels.py", "tests/test_checks*.py",
                         "notebooks/01_data.ipynb", "notebooks/06_train.ipynb"],
         "macOS x86_64": ["tests/test_device.py", "tests/test_kernels.py"]}


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
    """The numba-cuda a platform gets is one course/device.py was written for; simulator-only on macOS only."""
    from course import device
    nc = pins.get("numba-cuda")
    problems = []
    if nc not in device.WRITTEN_FOR["numba-cuda"]:
        problems.append(f"numba-cuda {nc} is not in course.device.WRITTEN_FOR")
    if (nc in device.SIMULATOR_ONLY) != name.startswith("macOS"):
        problems.append(f"numba-cuda {nc} on {name}: simulator-only builds are for macOS, and only there")
    if name.startswith("macOS") and any(p.startswith(("cuda-bindings", "nvidia-")) for p in pins):
        problems.append("CUDA wheels resolved for macOS")
    if tuple(int(x) for x in pins.get("numpy", "9").split(".")[:2]) >= (2, 5):
        problems.append(f"numpy {pins.get('numpy')}: keep numpy < 2.5")
    summary = ", ".join(f"{p} {pins.get(p)}" for p in NUMBA)
    print(f"{'ok  ' if not problems else 'FAIL'} {name}: {summary}" + "".join(f"\n     {p}" for p in problems))
    return not problems


def cmd_resolve(tmp):
    ok = True
    for python in PYTHONS:
        for name, target in {**MAC, **OTHERS}.items():
            ok &= check(f"{name} (Python {python})", resolve(tmp, target, python))
    return 0 if ok else 1


def cmd_mac(tmp):
    python = PYTHONS[-1]
    for name, target in MAC.items():
        t0 = time.monotonic()
        pins = resolve(tmp, target, python)
        venv = tmp / target
        sh(sys.executable, "-m", "venv", venv)
        sh(venv / "bin" / "pip", "install", "-q", *(f"{p}=={pins[p]}" for p in NUMBA + TOOLS))
        sh(venv / "bin" / "pip", "install", "-q", "--no-deps", "-e", ".")
        got = subprocess.run([venv / "bin" / "python", "-c", "import course.device as d; print(*d.cuda_build())"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        assert got == ["numba-cuda", pins["numba-cuda"]], f"{name}: the venv has {got}"
        env = {k: v for k, v in os.environ.items() if k not in ("COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM")}
        files = [str(f.relative_to(ROOT)) for pattern in TESTS[name] for f in sorted(ROOT.glob(pattern))]
        sh(venv / "bin" / "python", "-m", "pytest", "-q", *files, env=env)
        print(f"{name}: {', '.join(f'{p} {pins[p]}' for p in NUMBA)}: {time.monotonic() - t0:.0f} s", flush=True)
    return 0


def main():
    what = sys.argv[1:] or ["resolve", "mac"]
    with tempfile.TemporaryDirectory() as tmp:
        for w in what:
            if {"resolve": cmd_resolve, "mac": cmd_mac}[w](Path(tmp)):
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
