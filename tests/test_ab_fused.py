"""scripts/ab_fused without a GPU: its servers replaced by a stub that answers each token with a figure, so that what
is tested is the orchestration: every tree compiles at once, is timed in turn each round, and is summarised."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STUB = """
import os, sys, time
name, box, batches = sys.argv[1], sys.argv[2], sys.argv[3:]
if name == "broken":
    sys.exit("ImportError: no course here")
open(os.environ["AB_ORDER"], "a").write(f"compiled {name}\\n")
time.sleep(0.3)                                          # the compiles overlap: each waits for the others' lines
open(os.path.join(box, f"ready-{name}"), "w").close()
ms = {"ab1": 9.0, "ab2": 10.0, "this": 11.0}[name]
while not os.path.exists(os.path.join(box, "stop")):
    tokens = sorted(f for f in os.listdir(box) if f.startswith(f"go-{name}-"))
    if not tokens:
        time.sleep(0.01)
        continue
    r = tokens[0].rsplit("-", 1)[1]
    open(os.environ["AB_ORDER"], "a").write(f"timed {name} {r}\\n")
    for b in batches:
        print(f"{name} round {r} batch {b}: {ms + int(r) * 0.1:.2f} ms median, {ms:.2f} fastest", flush=True)
    os.remove(os.path.join(box, tokens[0]))
"""


def run_ab(tmp_path, *args, trees=("ab1", "ab2")):
    """scripts/ab_fused run ARGS over stub servers in tmp_path/ab/TREES and this tree: (the run, the stubs' order)."""
    for t in trees:
        (tmp_path / "ab" / t / "course").mkdir(parents=True)
    stub, order = tmp_path / "stub.py", tmp_path / "order"
    stub.write_text(STUB)
    env = {**os.environ, "AB_TREES": str(tmp_path / "ab"), "AB_SERVER": f"{sys.executable} {stub}",
           "AB_ORDER": str(order)}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "ab_fused"), "run", *args], capture_output=True, text=True,
                       timeout=120, env=env)
    return r, order.read_text().splitlines()


def test_every_tree_is_timed_in_turn_each_round_and_summarised(tmp_path):
    r, order = run_ab(tmp_path, "2", "64", "1024")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(order[:3]) == ["compiled ab1", "compiled ab2", "compiled this"]     # every compile first
    assert order[3:] == [f"timed {n} {k}" for k in (1, 2) for n in ("ab1", "ab2", "this")]  # then in turn
    out = r.stdout.splitlines()
    assert [line.split()[:5] for line in out if " round " in line] == [
        [n, "round", k, "batch", f"{b}:"] for n in ("ab1", "ab2", "this") for k in ("1", "2") for b in (64, 1024)]
    summary = out[out.index("median over the rounds of each round's median (ms per epoch):") + 1:]
    assert summary == [f"  {n:10s} batch {b:5d}: {ms:.2f} ms (2 rounds)" for n, ms in
                       (("ab1", 9.15), ("ab2", 10.15), ("this", 11.15)) for b in (64, 1024)]
    for tree in ("ab1", "ab2"):                          # each tree's course finds MNIST beside it
        assert (tmp_path / "ab" / tree / "data").resolve() == (ROOT / "data").resolve()


def test_the_turns_alternate_and_a_tree_that_fails_to_start_is_named_and_left_out(tmp_path):
    r, order = run_ab(tmp_path, "3", trees=("ab1", "broken", "ab2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "== broken: not ready, left out:" in r.stdout and "ImportError: no course here" in r.stdout
    assert [line for line in order if line.startswith("timed")] == [
        f"timed {n} {k}" for k in (1, 2, 3) for n in ("ab1", "ab2", "this")]
    assert "  ab2        batch    64: 10.20 ms (3 rounds)" in r.stdout


def test_the_server_times_what_it_says():
    src = (ROOT / "scripts" / "ab_server.py").read_text()
    assert "FusedTrainer(init_params(128, 0), B, 0.1, mode=\"epoch\")" in src
    assert "cuda.synchronize()" in src.split("t0 = time.perf_counter()")[1].split("ms.append")[0]


def test_prepare_puts_each_commits_course_in_its_own_tree(tmp_path):
    env = {**os.environ, "AB_TREES": str(tmp_path / "ab")}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "ab_fused"), "prepare", "HEAD"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for rev in ("HEAD",):                                 # (a clone for CI may hold one commit)
        short = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=ROOT).stdout
        fused = tmp_path / "ab" / short.strip() / "course" / "fused.py"
        shown = subprocess.run(["git", "show", f"{rev}:course/fused.py"], capture_output=True, text=True, cwd=ROOT)
        assert fused.read_text() == shown.stdout
