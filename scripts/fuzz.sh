#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs each one.
#
# Short mode (CI): scripts/fuzz.sh [seconds per target] [target...]   (default 24 s, every target)
#   Seeds come from tests/fuzz/corpus/<target> (read-only) with tests/fuzz/<target>.dict; new
#   inputs go to build-fuzz/tests/fuzz/corpus-scratch/<target> and crashes to
#   build-fuzz/tests/fuzz/crash-*. Prints one line per target with its executions.
#
# Build only: scripts/fuzz.sh --build [target...]   (scripts/device/fuzz_bundle.sh packs the result)
#
# Long mode: scripts/fuzz.sh --long (--execs N | --seconds S) [--jobs J] [--merge] [target...]
#   Runs J independent fuzzing processes per target (libFuzzer -jobs/-workers; default J = nproc),
#   each for N/J executions or S seconds, sharing a working corpus that starts from the committed
#   one; then picks the inputs that add coverage (-set_cover_merge) into a copy of the committed
#   corpus (build-fuzz/tests/fuzz/long/<target>/merged), or with --merge into
#   tests/fuzz/corpus/<target> itself (commit it). Prints the target's total executions,
#   executions per second and the corpus growth; any crash, leak, timeout or out-of-memory fails
#   the run and names the artifact. The run itself is scripts/fuzz-long-target.sh (binaries only),
#   which scripts/device/fuzz_long.sh runs on the GPU machine's 16 cores.
#
# Set JOBS to limit build parallelism; FUZZ_NICE (e.g. 19) runs the fuzzers at low priority.
# Afterwards `ctest --test-dir build-fuzz/tests/fuzz` runs the 10 s smoke test of each target.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL_TARGETS=(safetensors_header_fuzz npy_fuzz config_fuzz tokenizer_json_fuzz tokenizer_encode_fuzz chat_request_fuzz chat_output_fuzz)
LONG=0 EXECS=0 LONG_SECONDS=0 FUZZ_JOBS=$(nproc) MERGE=0 BUILD_ONLY=0
if [ "${1:-}" = "--build" ]; then
  BUILD_ONLY=1
  shift
elif [ "${1:-}" = "--long" ]; then
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
[ "$BUILD_ONLY" = 1 ] && exit 0
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
  local t=$1 work="$out/long/$1" budget=(--seconds "$LONG_SECONDS") line
  [ "$EXECS" -gt 0 ] && budget=(--execs "$EXECS")
  line=$(scripts/fuzz-long-target.sh "$out/$t" "tests/fuzz/$t.dict" "tests/fuzz/corpus/$t" "$work" "${budget[@]}" --jobs "$FUZZ_JOBS") ||
    { echo "$line"; echo "fuzz.sh: $t FAILED"; exit 1; }
  echo "$line"
  local before merged="tests/fuzz/corpus/$t"
  before=$(ls "$merged" | wc -l)
  if [ "$MERGE" = 0 ]; then
    merged="$work/merged"
    mkdir -p "$merged"
    cp "tests/fuzz/corpus/$t/"* "$merged/"
  fi
  "$out/$t" -set_cover_merge=1 "${FLAGS[@]}" "$merged" "$work/corpus" > "$work/logs/merge.log" 2>&1 ||
    { tail -20 "$work/logs/merge.log"; echo "fuzz.sh: $t merge FAILED"; exit 1; }
  echo "fuzz.sh: long: $t: $(echo "$line" | grep -oE 'execs=[0-9]+ seconds=[0-9.]+') ($FUZZ_JOBS jobs)," \
       "corpus $before -> $(ls "$merged" | wc -l) files in $merged, no crash"
}

for t in "${TARGETS[@]}"; do
  if [ "$LONG" = 1 ]; then run_long "$t"; else run_short "$t"; fi
done
