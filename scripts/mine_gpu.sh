#!/usr/bin/env bash
# Issue 11 on a GPU: a simulated student does every exercise of 01-10 (their solutions typed into the exercise
# cells, each check run, so each passing one is saved by course.mine), then `python -m course train --mine` trains
# the 784-128-10 MLP for 10 epochs on their kernels. Fails unless every piece the trainer runs is the student's and
# the test accuracy is >= 0.974. Writes notebooks/results/mine-<gpu>.json (default name mine-h200.json).
#   usage: scripts/mine_gpu.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-notebooks/results/mine-h200.json}"
export COURSE_DEVICE=gpu
export COURSE_MINE_DIR="$(mktemp -d)/mine"
python3 -c "from course import mine; mine.simulate_student()"
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
