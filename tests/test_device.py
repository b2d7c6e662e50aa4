"""The GPU/simulator choice: decided once by `import course`, forced by COURSE_DEVICE, reported by `info`."""
import os
import subprocess
import sys

import course


def run(*args, **env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_mode_matches_numba():
    from numba.cuda.core import config
    assert bool(config.ENABLE_CUDASIM) == course.SIMULATOR


def test_info_names_the_device():
    r = run("-m", "course", "info")
    assert r.returncode == 0, r.stderr
    if course.SIMULATOR:
        assert "simulator" in r.stdout
    else:
        assert "compute capability" in r.stdout and "SMs" in r.stdout


def test_forcing_the_simulator():
    r = run("-c", "import course, numba.cuda; print(course.SIMULATOR, type(numba.cuda.get_current_device()).__name__)",
            COURSE_DEVICE="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "FakeCUDADevice"]
    assert "CUDA simulator" in r.stderr


def test_bad_setting_is_refused():
    r = run("-c", "import course", COURSE_DEVICE="tpu")
    assert r.returncode != 0 and "COURSE_DEVICE='tpu'" in r.stderr


def test_importing_numba_cuda_first_in_the_other_mode_is_caught():
    mode = "1" if not course.SIMULATOR else "0"
    want = "gpu" if not course.SIMULATOR else "sim"
    r = run("-c", "import numba.cuda, course", NUMBA_ENABLE_CUDASIM=mode, COURSE_DEVICE=want)
    assert r.returncode != 0 and "import course" in r.stderr


def test_pick():
    assert course.pick(gpu=1, sim=2) == (2 if course.SIMULATOR else 1)
