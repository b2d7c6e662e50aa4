"""scripts/gpu-session on any GPU machine: result files named after the card nvidia-smi reports, no time limit
unless LIMIT asks for one, wheels only from WHEELS. Run here with stand-ins for python3 and nvidia-smi on PATH."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def session(tmp_path, *steps, **env):
    """Run scripts/gpu-session with a python3 that logs its arguments and an nvidia-smi that names an H100."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "python3").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n')
    (bin_ / "nvidia-smi").write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"), **env}
    r = subprocess.run([str(ROOT / "scripts" / "gpu-session"), *steps], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return r, calls


def test_results_are_named_after_the_card_and_no_limit_is_assumed(tmp_path):
    r, calls = session(tmp_path, "bench")
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls == ["-m course info", "-m course bench --out notebooks/results/bench-h100.json"]
    r, calls = session(tmp_path, "race", TAG="t4")
    assert calls[-1] == "-m course race --out notebooks/results/race-t4.json"


def test_a_limit_skips_the_steps_it_cannot_fit(tmp_path):
    r, calls = session(tmp_path, "bench", LIMIT="20")
    assert "SKIPPED (time)" in r.stdout and calls == ["-m course info"]


def test_wheels_come_only_from_the_folder_named(tmp_path):
    (tmp_path / "wheels").mkdir()
    r, calls = session(tmp_path, "bench", WHEELS=str(tmp_path / "wheels"))
    assert calls[0].startswith("-m pip install -q --no-index") and calls[0].endswith(f"{tmp_path}/wheels/*.whl")
    r, calls = session(tmp_path / "wheels", "bench")
    assert not [c for c in calls if "pip" in c]
