#!/usr/bin/env bash
# Every benchmark script at a tiny size, so that none of them can silently rot (CI runs this).
# One line per script in SMOKE below: a new benchmark adds its own line with its tiny mode.
# Results go to a temporary folder, not benchmarks/results/. Usage: benchmarks/smoke.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python}"
OUT="$(mktemp -d)"
SMOKE=(
  "benchmarks/assembly.py --quick --repeat 1 --stewart-max-batch 64 --out $OUT/assembly.json"
  "benchmarks/closure.py --quick --budget 60 --examples four_bar stewart --dtypes float64 --batches 1 8 --out $OUT/closure"
  "benchmarks/dynamics.py --tiny --reps 1 --out $OUT/dynamics.json"
  "benchmarks/multisim.py --duration 0.05"
  "benchmarks/profile_fd.py --batch 8 --reps 1"
  "benchmarks/reduction.py --quick --configs four_bar --out $OUT/reduction.json"
  "benchmarks/rollout.py --quick --budget 60 --dtypes float64 --batch 4 --seconds 0.02 --examples stewart --no-env --out $OUT/rollout"
  "benchmarks/sysid.py --quick --n 256 --iterations 3 --out $OUT/sysid"
  "benchmarks/compare.py --tiny --ops fk,closure,fd --out $OUT/compare.json"
  "benchmarks/paper_robots.py --small --robots stewart,go2,panda --out $OUT/paper_robots.json"
  "benchmarks/run_all.py --budget 40 --what closure,fd --batch 1,8 --precision f64"
  "benchmarks/scaling.py --devices 1,2 --batch 64 --reps 1"
)
for cmd in "${SMOKE[@]}"; do
  echo "== $cmd"
  start=$(date +%s)
  # shellcheck disable=SC2086
  $PY $cmd > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; echo "FAILED: $cmd"; exit 1; }
  tail -n 3 "$OUT/log.txt"
  echo "   ($(($(date +%s) - start)) s)"
done
echo "benchmarks smoke: ${#SMOKE[@]} scripts ran"
