"""Colab, reproduced here (no real Colab): a fresh venv with Colab's preinstalled packages, then the student copies'
first cell as Colab runs it, then notebook 06 in the simulator on what that cell installed.

    python .ci/colab.py      # from the CI venv (it imports course.tools.colab); .ci/run runs it last

1. A venv on Python 3.13 (Colab's, googlecolab/backend-info 2026-08) where this machine has it, else the nearest,
   with Colab's numpy 2.1.3, numba 0.61.2, numba-cuda 0.22.2 and the Jupyter kernel packages installed first.
2. The first code cell of notebooks/exercises/01_data.ipynb, run as a script with a stand-in `google.colab` module:
   it clones this repository (its committed HEAD, by file://, for the public address) and pip installs
   numba-cuda[cu12]==0.30.4 with the pins; then `import course` and `course.info()` from the clone.
3. Checked: numba-cuda 0.30.4 came in, Colab's numpy and numba stayed (the pins allow them), no Jupyter or test
   package was installed, upgraded or removed by the cell.
4. pytest and nbval added (tools of this check only), then notebook 06 runs with nbval in the clone: it loads the
   data and trains through every lesson module before it (01's own run is the Mac step's, .ci/platforms.py).
Proves: the cell's install resolves against Colab's set and the course runs on it in the simulator. Does not
prove: Colab's GPU runtime (its T4, driver 550, CUDA wheels at run time), Colab's own pip and kernel, Drive."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from course.tools import colab  # noqa: E402

PYTHON = (3, 13)
PREINSTALLED = ["numpy==2.1.3", "numba==0.61.2", "numba-cuda==0.22.2",  # Colab's, as backend-info lists them
                "matplotlib", "tqdm", "ipykernel", "nbformat", "nbclient"]  # also there: what runs a notebook
TOOLS = ["pytest", "pytest-xdist", "nbval"]                            # this check's own, after the cell
NOTEBOOKS = ["notebooks/06_train.ipynb"]                               # the one notebook only this step runs here
KEPT = ("numpy", "numba")                                              # the pins allow Colab's: pip keeps them
JUPYTER = ("ipykernel", "jupyter", "notebook", "tornado", "pyzmq", "traitlets", "nbformat", "nbclient", "ipython",
           "pytest", "nbval", "selenium")                              # prefixes the cell must leave alone
STAND_IN = "import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"


def sh(*cmd, **kw):
    """Run a command, echoing it; fail CI when it fails."""
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)


def interpreter():
    """Python 3.13 where this machine has one (PATH, pyenv), else the nearest version found, else this one."""
    found = {}
    for exe in [shutil.which(f"python3.{m}") for m in range(10, 15)] + \
            glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-4]*/bin/python3")):
        if exe and os.path.exists(exe):
            v = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                               text=True).stdout.split()
            if len(v) == 2:  # a pyenv shim without that version prints nothing
                found.setdefault(tuple(map(int, v)), exe)
    if not found:
        return sys.executable
    best = min(found, key=lambda v: (abs(v[1] - PYTHON[1]), -v[1]))
    return found[best]


def packages(python):
    """{name: version} installed in a venv."""
    out = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                         check=True).stdout
    return dict(line.lower().split("==", 1) for line in out.splitlines() if "==" in line)


def first_cell():
    """The first code cell of the student copy of 01, as python -m course exercises wrote it."""
    from course.tools import nbtools
    cells = nbtools.read(ROOT / "notebooks" / "exercises" / "01_data.ipynb")["cells"]
    return next(nbtools.source(c) for c in cells if c["cell_type"] == "code")


def as_here(cell, home):
    """The cell with the public address replaced by this repository (file://) and the clone put in `home`."""
    repo_line = f'    REPO, HOME = "{colab.repository()}", "{colab.HOME}"'
    if cell.count(repo_line) != 1:
        raise SystemExit(f"the first cell has no line `{repo_line.strip()}`: run python -m course exercises")
    return STAND_IN + cell.replace(repo_line, f'    REPO, HOME = "file://{ROOT}", "{home}"')


def changed(before, after, prefixes):
    """Packages whose name starts with one of `prefixes` that were added, removed or changed."""
    names = {n for n in set(before) | set(after) if n.startswith(prefixes)}
    return sorted(f"{n} {before.get(n)} -> {after.get(n)}" for n in names if before.get(n) != after.get(n))


def main():
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        python_exe = interpreter()
        sh(python_exe, "-m", "venv", tmp / "venv")
        py = tmp / "venv" / "bin" / "python"
        sh(py, "-m", "pip", "install", "-q", "--upgrade", "pip")
        sh(py, "-m", "pip", "install", "-q", *PREINSTALLED)
        before = packages(py)
        print("Colab's set:", ", ".join(f"{n} {before.get(n)}" for n in ("numpy", "numba", "numba-cuda")),
              "on", subprocess.run([py, "--version"], capture_output=True, text=True).stdout.strip(), flush=True)
        home = tmp / "content" / "course"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM",
                                                               "VIRTUAL_ENV")}
        cell = tmp / "first_cell.py"
        cell.write_text(as_here(first_cell(), home))
        sh(py, cell, cwd=tmp, env=env)                      # clones, installs, imports course, prints info()
        after = packages(py)
        problems = [f"numba-cuda is {after.get('numba-cuda')}, not 0.30.4"] if after.get("numba-cuda") != "0.30.4" \
            else []
        problems += [f"{n} changed: {before.get(n)} -> {after.get(n)}" for n in KEPT if before.get(n) != after.get(n)]
        problems += [f"the cell touched {c}" for c in changed(before, after, JUPYTER)]
        print("after the cell:", ", ".join(f"{n} {after.get(n)}" for n in ("numpy", "numba", "numba-cuda")),
              f"({time.monotonic() - t0:.0f} s so far)", flush=True)
        if problems:
            print("FAIL " + "; ".join(problems))
            return 1
        sh(py, "-m", "pip", "install", "-q", *TOOLS)
        sh(py, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *NOTEBOOKS, cwd=home, env=env)
    print(f"ok   Colab's set: the first cell installs and notebook 06 runs ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
