#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs each one.
#
# Short mode (CI): scripts/fuzz.sh [seconds per target] [target...]   (default 24 s, every target)
#   Seeds come from tests/fuzz/corpus/<target> (read-only) with tests/fuzz/<target>.dict; new
#   inputs go to build-fuzz/tests/fuzz/corpus-scratch/<target> and crashes to
#   build-fuzz/tests/fuzz/crash-*. Prints one line per target with its executions.
#
# Long mode: scripts/fuzz.sh --long (--execs N | --seconds S) [--jobs J] [--merge] [target...]
#   Runs J independent fuzzing processes per target (libFuzzer -jobs/-workers; default J = nproc),
#   each for N/J executions or S seconds, sharing a working corpus that starts from the committed
#   one; then picks the inputs that add coverage (-set_cover_merge) into a copy of the committed
#   corpus (build-fuzz/tests/fuzz/long/<target>/merged), or with --merge into
#   tests/fuzz/corpus/<target> itself (commit it). Prints the target's total executions,
#   executions per second and the corpus growth; any crash, leak, timeout or out-of-memory fails
#   the run and names the artifact.
#
# Set JOBS to limit build parallelism; FUZZ_NICE (e.g. 19) runs the fuzzers at low priority.
# Afterwards `ctest --test-dir build-fuzz/tests/fuzz` runs the 10 s smoke test of each target.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL_TARGETS=(safetensors_header_fuzz npy_fuzz config_fuzz tokenizer_json_fuzz tokenizer_encode_fuzz)
LONG=0 EXECS=0 LONG_SECONDS=0 FUZZ_JOBS=$(nproc) MERGE=0
if [ "${1:-}" = "--long" ]; then
  LONG=1
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --execs) EXECS=$2; shift 2 ;;
      --seconds) LONG_SECONDS=$2; shift 2 ;;
      --jobs) FUZZ_JOBS=$2; shift 2 ;;
      --merge) MERGE=1; shift ;;
      -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
      *) break ;;
    esac
  done
  if [ $(( (EXECS > 0) + (LONG_SECONDS > 0) )) -ne 1 ]; then
    echo "usage: $0 --long (--execs N | --seconds S) [--jobs J] [--merge] [target...]" >&2
    exit 2
  fi
  [ "$FUZZ_JOBS" -ge 1 ] || { echo "fuzz.sh: --jobs must be at least 1" >&2; exit 2; }
else
  SECONDS_TO_RUN=${1:-24}
  shift || true
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
CC=${FUZZ_CC:-clang} CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLUMB_BUILD_FUZZ=ON -DPLUMB_BUILD_TESTS=OFF -DPLUMB_BUILD_BENCH=OFF \
  -DPLUMB_GPU=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
out="$BUILD_DIR/tests/fuzz"
FLAGS=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)

run_short() {  # target
  local t=$1 log="$out/$1.log"
  mkdir -p "$out/corpus-scratch/$t"
  nice -n "${FUZZ_NICE:-0}" "$out/$t" -max_total_time="$SECONDS_TO_RUN" "${FLAGS[@]}" -dict="tests/fuzz/$t.dict" \
    -artifact_prefix="$out/" "$out/corpus-scratch/$t" "tests/fuzz/corpus/$t" > "$log" 2>&1 ||
    { tail -40 "$log"; echo "fuzz.sh: $t FAILED"; exit 1; }
  echo "fuzz.sh: $t: $(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}') inputs in $SECONDS_TO_RUN s, no crash"
}

run_long() {  # target
  local t=$1 work="$out/long/$1"
  local bin
  bin=$(cd "$out" && pwd)/$t
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/logs" "$work/artifacts"
  cp "tests/fuzz/corpus/$t/"* "$work/corpus/"
  local budget=(-max_total_time="$LONG_SECONDS")
  [ "$EXECS" -gt 0 ] && budget=(-runs=$(( (EXECS + FUZZ_JOBS - 1) / FUZZ_JOBS )))
  local dict artifacts corpus start rc=0
  dict=$(pwd)/tests/fuzz/$t.dict artifacts=$(cd "$work/artifacts" && pwd)/ corpus=$(cd "$work/corpus" && pwd)
  start=$(date +%s)
  # -jobs writes each job's output to fuzz-<job>.log in the working directory.
  (cd "$work/logs" && nice -n "${FUZZ_NICE:-0}" "$bin" -jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS" "${budget[@]}" \
     "${FLAGS[@]}" -dict="$dict" -artifact_prefix="$artifacts" "$corpus" > parent.log 2>&1) || rc=$?
  local seconds=$(( $(date +%s) - start ))
  local found
  found=$(ls "$work/artifacts")
  if [ "$rc" -ne 0 ] || [ -n "$found" ] || grep -lE '^==[0-9]+==ERROR|^SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$work"/logs/fuzz-*.log >/dev/null 2>&1; then
    tail -40 "$work"/logs/fuzz-*.log
    echo "fuzz.sh: $t FAILED (exit $rc; artifacts in $work/artifacts: ${found:-none})"
    exit 1
  fi
  local execs
  execs=$(cat "$work"/logs/fuzz-*.log | awk '/stat::number_of_executed_units/ {n += $2} END {print n + 0}')
  local before merged="tests/fuzz/corpus/$t"
  before=$(ls "$merged" | wc -l)
  if [ "$MERGE" = 0 ]; then
    merged="$work/merged"
    mkdir -p "$merged"
    cp "tests/fuzz/corpus/$t/"* "$merged/"
  fi
  "$bin" -set_cover_merge=1 "${FLAGS[@]}" "$merged" "$corpus" > "$work/logs/merge.log" 2>&1 ||
    { tail -20 "$work/logs/merge.log"; echo "fuzz.sh: $t merge FAILED"; exit 1; }
  echo "fuzz.sh: long: $t: $execs executions in $seconds s ($(( execs / (seconds > 0 ? seconds : 1) )) exec/s," \
       "$FUZZ_JOBS jobs), corpus $before -> $(ls "$merged" | wc -l) files in $merged, no crash"
}

for t in "${TARGETS[@]}"; do
  if [ "$LONG" = 1 ]; then run_long "$t"; else run_short "$t"; fi
done
