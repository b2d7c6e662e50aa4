"""scripts/tune_fused.py's command line: a bad --batch or --small-x is one line and exit code 2."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("arg", ["--batch=abc", "--batch=0", "--small-x=-1"])
def test_a_bad_option_is_one_line_and_exit_code_2(arg):
    env = dict(os.environ, COURSE_DEVICE="sim", NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_fused.py"), arg], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1:] == [f"tune_fused.py: --{arg[2:].split('=')[0]} takes an integer of at least "
                                             f"{0 if 'small' in arg else 1}, got {arg.split('=')[1]!r}"]
