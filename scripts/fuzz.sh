#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs each for a bounded
# time. Usage: scripts/fuzz.sh [seconds per target] [target...]   (default 24 s, every target)
# Seeds come from tests/fuzz/corpus/<target> (read-only) with tests/fuzz/<target>.dict; new inputs
# go to build-fuzz/tests/fuzz/corpus-scratch/<target> and crashes to build-fuzz/tests/fuzz/crash-*.
# Prints one line per target with its executions. Set JOBS to limit build parallelism; FUZZ_NICE
# (e.g. 19) runs the fuzzers at low priority. Afterwards `ctest --test-dir build-fuzz/tests/fuzz`
# runs the 10 s smoke test of each target.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-24}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors_header_fuzz npy_fuzz config_fuzz tokenizer_json_fuzz tokenizer_encode_fuzz)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
CC=${FUZZ_CC:-clang} CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLUMB_BUILD_FUZZ=ON -DPLUMB_BUILD_TESTS=OFF -DPLUMB_BUILD_BENCH=OFF \
  -DPLUMB_GPU=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
out="$BUILD_DIR/tests/fuzz"
for t in "${TARGETS[@]}"; do
  mkdir -p "$out/corpus-scratch/$t"
  log="$out/$t.log"
  nice -n "${FUZZ_NICE:-0}" "$out/$t" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
    -dict="tests/fuzz/$t.dict" -print_final_stats=1 -artifact_prefix="$out/" \
    "$out/corpus-scratch/$t" "tests/fuzz/corpus/$t" > "$log" 2>&1 || { tail -40 "$log"; echo "fuzz.sh: $t FAILED"; exit 1; }
  echo "fuzz.sh: $t: $(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}') inputs in $SECONDS_TO_RUN s, no crash"
done
