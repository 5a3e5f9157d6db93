#!/usr/bin/env bash
# One libFuzzer target's long run, from a built binary only (no build tools needed: scripts/fuzz.sh
# --long uses it here, scripts/device/fuzz_long.sh on the GPU machine's CPUs):
#   scripts/fuzz-long-target.sh BINARY DICT SEED_DIR WORK_DIR (--execs N | --seconds S) [--jobs J] [--max-seconds S]
# Runs J fuzzing processes (libFuzzer -jobs/-workers; default J = nproc) sharing WORK_DIR/corpus,
# which starts as a copy of SEED_DIR; each process stops after N/J executions (--execs) or S
# seconds; --max-seconds caps an --execs run's time too (then fewer executions are reported).
# Crashes, leaks, timeouts and out-of-memory inputs go to WORK_DIR/artifacts. Prints one line:
#   fuzz-long: NAME execs=E seconds=T crashes=C cov=V ft=F corpus=K
# (cov/ft: the edges and features the final corpus covers, from a -runs=0 pass over it) and
# exits 1 when anything was found.
set -uo pipefail
[ $# -ge 6 ] || { echo "usage: $0 BINARY DICT SEED_DIR WORK_DIR (--execs N | --seconds S) [--jobs J] [--max-seconds S]" >&2; exit 2; }
bin=$(readlink -f "$1") dict=$(readlink -f "$2") seeds=$3 work=$4
shift 4
EXECS=0 SECS=0 MAX_SECS=0 JOBS=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --execs) EXECS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --max-seconds) MAX_SECS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) echo "fuzz-long-target.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $(( (EXECS > 0) + (SECS > 0) )) -eq 1 ] || { echo "fuzz-long-target.sh: give exactly one of --execs and --seconds" >&2; exit 2; }
[ "$JOBS" -ge 1 ] || { echo "fuzz-long-target.sh: --jobs must be at least 1" >&2; exit 2; }
name=$(basename "$bin")
rm -rf "$work"
mkdir -p "$work/corpus" "$work/logs" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
work=$(readlink -f "$work")
FLAGS=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -dict="$dict")
budget=(-max_total_time="$SECS")
if [ "$EXECS" -gt 0 ]; then
  budget=(-runs=$(( (EXECS + JOBS - 1) / JOBS )))
  [ "$MAX_SECS" -gt 0 ] && budget+=(-max_total_time="$MAX_SECS")
fi
start=$(date +%s.%N)
# -jobs writes each job's output to fuzz-<job>.log in the working directory.
(cd "$work/logs" && nice -n "${FUZZ_NICE:-0}" "$bin" -jobs="$JOBS" -workers="$JOBS" "${budget[@]}" "${FLAGS[@]}" \
   -artifact_prefix="$work/artifacts/" "$work/corpus" > parent.log 2>&1)
rc=$?
seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
execs=$(cat "$work"/logs/fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ {n += $2} END {print n + 0}')
crashes=$(find "$work/artifacts" -type f | wc -l)
if [ "$crashes" -eq 0 ] && grep -lE '^==[0-9]+==ERROR|^SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer' "$work"/logs/fuzz-*.log >/dev/null 2>&1; then
  crashes=1  # a report without an artifact (should not happen): still a finding
fi
# The final corpus's coverage: one pass over it, no mutation.
"$bin" -runs=0 "${FLAGS[@]}" "$work/corpus" > "$work/logs/coverage.log" 2>&1
cov=$(grep -oE 'INITED cov: [0-9]+ ft: [0-9]+' "$work/logs/coverage.log" | tail -1)
echo "fuzz-long: $name execs=$execs seconds=$seconds crashes=$crashes cov=$(echo "$cov" | awk '{print $3}')" \
     "ft=$(echo "$cov" | awk '{print $5}') corpus=$(ls "$work/corpus" | wc -l)"
if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
  tail -30 "$work"/logs/fuzz-*.log | grep -E 'ERROR|SUMMARY|Test unit written|deadly' | head -20
  echo "fuzz-long: $name FAILED (exit $rc; artifacts in $work/artifacts)"
  exit 1
fi
