"""scripts/ab_fused without a GPU: its servers replaced by a stub that answers each token with a figure (and, for
ncu, with the CSV that `ncu --csv --page raw` prints), so that what is tested is the orchestration: every tree
compiles at once, is timed (or profiled) in turn, and is summarised."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import ab_server  # noqa: E402

STUB = """
import json, os, sys, time
mode, name, box, batches = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
log = lambda line: open(os.environ["AB_ORDER"], "a").write(line + "\\n")
if name == "broken":
    sys.exit("ImportError: no course here")
log(f"compiled {name}")
time.sleep(0.3)                                          # the compiles overlap: each waits for the others' lines
open(os.path.join(box, f"ready-{name}"), "w").close()
ms = {"ab1": 9.0, "ab2": 10.0, "this": 11.0, "dies": 0.0}[name]
if mode == "profile":
    while not os.path.exists(os.path.join(box, f"go-{name}-1")):
        time.sleep(0.01)
    log(f"profile {name} starts")
    time.sleep(0.2)
    log(f"profile {name} ends")
    print('==PROF== Connected to process 1 (python3)')
    print('"ID","Process ID","Kernel Name","gpu__time_duration.sum","smsp__inst_executed.sum",'
          '"smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio","sm__throughput.avg.pct"')
    print('"","","","ns","inst","ratio","%"')
    print(f'"0","4242","fused_steps_kernel","{int(ms * 1e6)}","123456789","{ms / 10:.2f}","50"')
    sys.exit()
while not os.path.exists(os.path.join(box, "stop")):
    tokens = sorted(f for f in os.listdir(box) if f.startswith(f"go-{name}-"))
    if not tokens:
        time.sleep(0.01)
        continue
    r = tokens[0].rsplit("-", 1)[1]
    log(f"timed {name} {r}")
    if name == "dies":
        sys.exit("CUDA_ERROR_ILLEGAL_ADDRESS")
    for b in batches:
        print(f"{name} round {r} batch {b}: {ms + int(r) * 0.1:.2f} ms median, {ms:.2f} fastest", flush=True)
        clocks = {"A: X W1": ms / 10 + int(r) * 0.01, "barrier 1": 0.5}
        print(f"{name} round {r} batch {b} clocks {json.dumps(clocks)}", flush=True)
    os.remove(os.path.join(box, tokens[0]))
"""


def run_ab(tmp_path, *args, trees=("ab1", "ab2")):
    """scripts/ab_fused ARGS over stub servers in tmp_path/ab/TREES and this tree: (the run, the stubs' order)."""
    for t in trees:
        (tmp_path / "ab" / t / "course").mkdir(parents=True)
    stub, order = tmp_path / "stub.py", tmp_path / "order"
    stub.write_text(STUB)
    env = {**os.environ, "AB_TREES": str(tmp_path / "ab"), "AB_SERVER": f"{sys.executable} {stub}",
           "AB_ORDER": str(order), "AB_NCU": ""}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "ab_fused"), *args], capture_output=True, text=True,
                       timeout=120, env=env)
    return r, order.read_text().splitlines()


def test_every_tree_is_timed_in_turn_each_round_forward_then_backward_and_summarised(tmp_path):
    r, order = run_ab(tmp_path, "run", "2", "64", "1024")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(order[:3]) == ["compiled ab1", "compiled ab2", "compiled this"]     # every compile first
    assert order[3:] == [f"timed {n} 1" for n in ("ab1", "ab2", "this")] + [         # then in turn, and back
        f"timed {n} 2" for n in ("this", "ab2", "ab1")]
    out = r.stdout.splitlines()
    assert [line.split()[:5] for line in out if " round " in line] == [
        [n, "round", k, "batch", f"{b}:"] for n in ("ab1", "ab2", "this") for k in ("1", "2") for b in (64, 1024)]
    at = out.index("median over the rounds of each round's median (ms per epoch):")
    assert out[at + 1:at + 7] == [f"  {n:10s} batch {b:5d}: {ms:.2f} ms (2 rounds)" for n, ms in
                                  (("ab1", 9.15), ("ab2", 10.15), ("this", 11.15)) for b in (64, 1024)]
    at = out.index("clocks at batch 64, µs (median over the rounds; course.epoch.clock_report):")
    assert out[at + 1].split() == ["part", "ab1", "ab2", "this"]
    assert out[at + 2].split() == ["A:", "X", "W1", "0.92", "1.02", "1.12"]           # the median of two rounds
    assert out[at + 3].split() == ["barrier", "1", "0.50", "0.50", "0.50"]
    for tree in ("ab1", "ab2"):                          # each tree's course finds MNIST beside it
        assert (tmp_path / "ab" / tree / "data").resolve() == (ROOT / "data").resolve()


def test_the_turns_alternate_and_a_tree_that_fails_to_start_is_named_and_left_out(tmp_path):
    r, order = run_ab(tmp_path, "run", "3", trees=("ab1", "broken", "ab2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "== broken: not ready, left out:" in r.stdout and "ImportError: no course here" in r.stdout
    forward = ("ab1", "ab2", "this")
    assert [line for line in order if line.startswith("timed")] == [
        f"timed {n} {k}" for k in (1, 2, 3) for n in (forward if k % 2 else forward[::-1])]
    assert "  ab2        batch    64: 10.20 ms (3 rounds)" in r.stdout
    assert "broken" not in r.stdout.split("median over the rounds")[1]


def test_a_server_that_dies_in_its_turn_is_named_and_the_others_go_on(tmp_path):
    r, order = run_ab(tmp_path, "run", "2", trees=("ab1", "dies"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert [line for line in order if line.startswith("timed")] == [
        "timed ab1 1", "timed dies 1", "timed this 1", "timed this 2", "timed ab1 2"]   # no wait for the dead one
    assert "== dies: no times:" in r.stdout and "CUDA_ERROR_ILLEGAL_ADDRESS" in r.stdout
    assert "  this       batch    64: 11.15 ms (2 rounds)" in r.stdout


def test_ncu_profiles_one_tree_at_a_time_after_every_compile_and_tabulates_the_stalls(tmp_path):
    r, order = run_ab(tmp_path, "ncu", "64")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(order[:3]) == ["compiled ab1", "compiled ab2", "compiled this"]
    assert order[3:] == [f"profile {n} {e}" for n in ("ab1", "ab2", "this") for e in ("starts", "ends")]
    out = r.stdout.splitlines()
    at = out.index("ncu (one epoch each; a stall: warps stalled on it per instruction issued, smsp__average_warps_"
                   "issue_stalled_REASON_per_issue_active):")
    assert out[at + 1].split() == ["metric", "ab1", "ab2", "this"]
    assert out[at + 2].split() == ["gpu__time_duration.sum", "9000000", "10000000", "11000000"]
    assert out[at + 3].split() == ["smsp__inst_executed.sum"] + ["123456789"] * 3
    assert out[at + 4].split() == ["stall", "no_instruction", "0.90", "1.00", "1.10"]
    assert "sm__throughput" not in r.stdout               # only the time, the instructions and the stalls


def test_the_summary_reads_ncu_csv_with_its_units_row_and_the_programs_own_lines(tmp_path):
    (tmp_path / "t.out").write_text('t: profiled batch 64\n==PROF== Disconnected\n"ID","Kernel Name","launch__grid_size"\n'
                                    '"","","block"\n"0","fused_steps_kernel","132"\n')
    assert ab_server.read_ncu_csv(tmp_path / "t.out") == {"ID": "0", "Kernel Name": "fused_steps_kernel",
                                                          "launch__grid_size": "132"}
    (tmp_path / "u.out").write_text("no rows: ncu failed\n")
    assert ab_server.read_ncu_csv(tmp_path / "u.out") == {}
    clocks = {"B: softmax, dZ2": 1.25}
    (tmp_path / "s.out").write_text(f"s round 1 batch 64: 9.10 ms median, 9.00 fastest, last loss 0.05\n"
                                    f"s round 1 batch 64 clocks {json.dumps(clocks)}\n")
    assert ab_server.read_serve_log(tmp_path / "s.out") == ({64: [9.1]}, {64: {"B: softmax, dZ2": [1.25]}})


def test_the_server_times_what_it_says():
    src = (ROOT / "scripts" / "ab_server.py").read_text()
    assert "FusedTrainer(init_params(128, 0), B, 0.1, mode=\"epoch\")" in src
    assert "cuda.synchronize()" in src.split("t0 = time.perf_counter()")[1].split("ms.append")[0]
    timed, clocked = src.split("T = trainer.timed_epoch(")   # the clocks: an epoch of their own, after the timed ones
    assert "ms.append" in timed and "ms.append" not in clocked


def test_prepare_puts_each_commits_course_in_its_own_tree_under_its_hash_or_a_name(tmp_path):
    env = {**os.environ, "AB_TREES": str(tmp_path / "ab")}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "ab_fused"), "prepare", "HEAD", "again=HEAD"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    short = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()                    # (a clone for CI may hold one commit)
    shown = subprocess.run(["git", "show", "HEAD:course/fused.py"], capture_output=True, text=True, cwd=ROOT)
    for name in (short, "again"):
        assert (tmp_path / "ab" / name / "course" / "fused.py").read_text() == shown.stdout


def test_the_real_server_answers_a_token_with_times_and_clocks_off_a_gpu(tmp_path, monkeypatch, capsys):
    """ab_server.serve on a small net in the simulator (128 rows, two steps): the course's API they call (FusedTrainer,
    timed_epoch, clock_report, ntiles) is there, and its lines parse (a broken server costs a GPU session)."""
    import threading
    import time

    import numpy as np

    import course.data
    import course.train
    X, y, _, _ = course.data.load_mnist()
    monkeypatch.setattr(course.data, "load_mnist", lambda: (np.ascontiguousarray(X[:128, :64]), y[:128], None, None))
    init = course.train.init_params
    monkeypatch.setattr(course.train, "init_params", lambda hidden, seed: init(16, seed, n_in=64))
    monkeypatch.setattr(ab_server, "EPOCHS", 1)

    def driver():                                       # the orchestrator: one token, then stop
        while not (tmp_path / "ready-t").exists():
            time.sleep(0.05)
        (tmp_path / "go-t-1").touch()
        while (tmp_path / "go-t-1").exists():
            time.sleep(0.05)
        (tmp_path / "stop").touch()
    threading.Thread(target=driver, daemon=True).start()
    ab_server.serve("t", str(tmp_path), [64])
    out = capsys.readouterr()
    (tmp_path / "t.out").write_text(out.out)
    ms, parts = ab_server.read_serve_log(tmp_path / "t.out")
    assert list(ms) == [64] and ms[64][0] > 0
    assert set(parts[64]) >= {"B: softmax, dZ2", "barrier 1 (last arrival to first release)"}
    assert all(len(us) == 1 and us[0] >= 0 for us in parts[64].values())   # one round, one figure a part
    step_us, = parts[64]["step"]
    assert parts[64][ab_server.IN_KERNEL] == [2 * step_us / 1e3]   # two steps
