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
  "benchmarks/rollout.py --quick --budget 150 --dtypes float64 --batch 4 --seconds 0.02 --examples stewart --out $OUT/rollout"
  "benchmarks/sysid.py --quick --n 256 --iterations 3 --out $OUT/sysid"
  "benchmarks/sysid_measured.py --quick --n-stewart 0 --out $OUT/sysid_measured"
  "benchmarks/growth.py --n 1,2 --batch 8 --reps 1 --out $OUT/growth.json"
  "benchmarks/compare.py --tiny --ops fk,closure,fd,assemble,track,rollout --out $OUT/compare.json"
  "benchmarks/paper_robots.py --small --robots stewart,go2,panda --out $OUT/paper_robots.json"
  "benchmarks/run_all.py --budget 40 --what closure,fd --batch 1,8 --precision f64"
  "benchmarks/scaling.py --devices 1,2 --batch 64 --reps 1"
  "benchmarks/gauge.py --reps 1 --out $OUT/gauge.json"
  "benchmarks/small_linalg.py --sizes 4 8 --batches 64 --reps 1 --out $OUT/small_linalg.json"
)
run_one() {  # run one script, its log in its own file; print its tail and time
  local i=$1 cmd=$2 start
  start=$(date +%s)
  # A hung script (e.g. a batched solver deadlocking XLA's CPU pool) fails after 15 min instead of
  # eating CI's whole budget.
  # shellcheck disable=SC2086
  if timeout 900 $PY $cmd > "$OUT/log$i.txt" 2>&1; then
    printf '== %s\n%s\n   (%s s)\n' "$cmd" "$(tail -n 3 "$OUT/log$i.txt")" "$(($(date +%s) - start))"
  else
    local rc=$?
    cat "$OUT/log$i.txt"; echo "FAILED (rc $rc, 124 = timed out after 900 s): $cmd"; return 1
  fi
}
# Two lanes (the scripts are compile-bound and XLA compiles on one thread): even and odd lines.
lane() {
  local k
  for ((k = $1; k < ${#SMOKE[@]}; k += 2)); do run_one "$k" "${SMOKE[$k]}" || return 1; done
}
lane 0 > "$OUT/lane0.txt" 2>&1 & p0=$!
lane 1 > "$OUT/lane1.txt" 2>&1 & p1=$!
rc=0
wait $p0 || rc=1
wait $p1 || rc=1
cat "$OUT/lane0.txt" "$OUT/lane1.txt"
[ $rc -eq 0 ] || { echo "benchmarks smoke: FAILED"; exit 1; }
echo "benchmarks smoke: ${#SMOKE[@]} scripts ran"
