#!/usr/bin/env bash
# The student's own kernels on a GPU, end to end: a simulated student (tests/simulated_student.py) does every
# exercise of 01-14 (their solutions typed into the exercise cells, each check run, so each passing one is saved by
# course.runtime.solutions), then `python -m course train --mine` trains
# the 784-128-10 MLP for 10 epochs on their kernels. Fails unless every piece the trainer runs is the student's and
# the test accuracy is >= 0.974. Then the fused epoch kernel (notebooks 11 and 12) trains 10 epochs on the student's
# tile_origin, halve and warp_class_sums (exercises 11.1, 12.1 and 12.2), to the same bar. Writes notebooks/results/mine-<gpu>.json (default name mine-h200.json).
#   usage: scripts/mine_gpu.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-notebooks/results/mine-h200.json}"
export COURSE_DEVICE=gpu
export COURSE_MINE_DIR="$(mktemp -d)/mine"
PYTHONPATH="tests${PYTHONPATH:+:$PYTHONPATH}" python3 -c "from simulated_student import simulate_student; simulate_student()"
python3 -m course train --mine --epochs 10 --hidden 128 --optimizer sgd --lr 0.1 --batch-size 64 --seed 0 --out "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
theirs = sorted(k for k, v in r["mine"].items() if v == "yours")
assert theirs == sorted(r["mine"]), f"not every piece is the student's: {r['mine']}"
assert r["test_accuracy"] >= 0.974, f"test accuracy {r['test_accuracy']:.4f} < 0.974"
print(f"OK: {len(theirs)} of {len(r['mine'])} trainer pieces were the student's; "
      f"test accuracy {r['test_accuracy']:.4f} >= 0.974 on {r['device']['name']}")
PY
python3 - <<'PY'
from course.runtime import mine, registry
import course.fused as fused
from course.data import load_mnist
pieces = {"11.1": "tile_origin", "12.1": "halve", "12.2": "warp_class_sums"}
st = mine.use_mine(list(pieces), quiet=True)
for key, name in pieces.items():
    assert st[key][1] == "yours", st
    fn = registry.pick(key, None)
    assert fused.with_yours(fused.fused_steps_kernel).py_func.__globals__[name] is fn, name
    assert fn.py_func.__code__.co_filename.endswith(f"ex_{key.replace('.', '_')}.py"), fn
run = fused.fit_fused(*load_mnist(), mode="epoch", hidden=128, epochs=10, batch_size=64, lr=0.1, seed=0, progress=False)
acc = run["epoch"][-1]["test_acc"]
assert acc >= 0.974, f"test accuracy {acc:.4f} < 0.974"
print(f"OK: the fused epoch kernel on the student's tile_origin, halve and warp_class_sums (exercises 11.1, 12.1, "
      f"12.2): test accuracy {acc:.4f}")
PY
