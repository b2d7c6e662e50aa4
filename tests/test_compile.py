"""Every kernel compiles for a real GPU (sm_90 PTX), checked on a machine without one.

The simulator runs kernels as Python and never type-checks them, so a kernel can pass every simulated test and
fail at its first compile on a GPU (a float64 literal is fine, a dict is not; numpy 2.5 broke numba-cuda here)."""
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

import course
from course import device
from course.tools.signatures import all_signatures


@pytest.mark.slow
@pytest.mark.skipif(bool(device.simulator_only()), reason=f"{device.simulator_only()}; CI compiles on Linux")
def test_every_kernel_compiles_for_sm90():
    r = subprocess.run([sys.executable, "-m", "course.tools.compile"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok   ") == sum(len(s) for s in all_signatures().values())


def test_signature_table_lists_every_kernel():
    from course.tools.compile import kernels_in
    found = set()
    for m in pkgutil.iter_modules(course.__path__):
        if m.name == "__main__" or m.ispkg:  # course.tools and course.checks define no kernel
            continue
        module = importlib.import_module(f"course.{m.name}")
        found |= {f"course.{m.name}:{k}" for k in kernels_in(module)}
    assert found == set(all_signatures()), "list the new kernels in their topic's table of course/tools/signatures.py"
