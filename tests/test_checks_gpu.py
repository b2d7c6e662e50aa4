"""On a real GPU only: a kernel that faults (illegal address) poisons the process's CUDA context. The check that
launched it names the case and says to restart; every later check in that process says so first, instead of
failing at cuMemAlloc; and a fault from a launch outside any check is noticed at the next check. Each scenario runs
in a fresh Python process, since the context cannot be repaired. (In the simulator the same logic is tested with a
simulated error: tests/test_checks_core.py.)"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import course

pytestmark = pytest.mark.skipif(course.SIMULATOR, reason="needs a GPU: the simulator cannot fault")

PRELUDE = """
import json
import sys
import numpy as np
import course
from numba import cuda
from course.checks import CheckFailure
from course.checks import data as c01
from course.checks import forward as c02
from course.forward import matmul_v1_kernel
from course.scale import scale_kernel
sys.path.insert(0, TESTS)
from conftest import mutant

scale_far_away = mutant(scale_kernel, "out[i] = ", "out[i + (1 << 38)] = ")  # a terabyte past: an illegal address

def attempt(check, fn):
    try:
        check(fn)
        return "passed"
    except CheckFailure as e:
        return str(e)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
"""


def run(body):
    """Run PRELUDE + body in a fresh interpreter; body prints one JSON line."""
    src = f"TESTS = {os.path.dirname(os.path.abspath(__file__))!r}\n" + PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("[")]
    assert lines, f"exit code {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return json.loads(lines[-1])  # (a poisoned process may complain while it frees memory at exit)


def test_fault_in_a_check_then_a_correct_answer_in_the_same_process():
    r = run("""
        first = attempt(c01.check_scale_kernel, scale_far_away)
        second = attempt(c02.check_matmul_kernel, matmul_v1_kernel)
        print(json.dumps([first, second]))
    """)
    first, second = r
    assert first.startswith("Exercise 1.2 failed with n="), first
    assert "ILLEGAL_ADDRESS" in first and "Kernel > Restart" in first, first
    assert second.startswith("Exercise 2.1 cannot run: an earlier kernel crashed the GPU"), second
    assert "Kernel > Restart" in second and "cuMemAlloc" not in second.split("\n")[0][:60], second


def test_fault_outside_any_check_is_reported_by_the_next_check():
    r = run("""
        x = cuda.to_device(np.arange(100, dtype=np.uint8))
        out = cuda.device_array(100, np.float32)
        scale_far_away[1, 128](x, out)          # a student's own launch in a cell, not synchronized
        print(json.dumps([attempt(c01.check_scale_kernel, scale_kernel)]))
    """)
    assert r[0].startswith("Exercise 1.2 cannot run: an earlier kernel crashed the GPU"), r[0]
    assert "Kernel > Restart" in r[0]


def test_checks_pass_in_a_healthy_process():
    r = run("""
        print(json.dumps([attempt(c01.check_scale_kernel, scale_kernel), attempt(c02.check_matmul_kernel, matmul_v1_kernel)]))
    """)
    assert r == ["passed", "passed"], r
