#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs the safetensors
# header fuzzer for a bounded time. Usage: scripts/fuzz.sh [seconds]   (default 60)
# Seeds come from tests/fuzz/corpus (read-only); new inputs go to build-fuzz/tests/fuzz/corpus-scratch
# and crashes to build-fuzz/tests/fuzz/crash-*. Set JOBS to limit build parallelism. Afterwards,
# `ctest --test-dir build-fuzz/tests/fuzz` runs the 20 s smoke test registered by tests/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
CC=${FUZZ_CC:-clang} CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLUMB_BUILD_FUZZ=ON -DPLUMB_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target safetensors_header_fuzz
out="$BUILD_DIR/tests/fuzz"
mkdir -p "$out/corpus-scratch"
"$out/safetensors_header_fuzz" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -dict=tests/fuzz/safetensors.dict -print_final_stats=1 -artifact_prefix="$out/" \
  "$out/corpus-scratch" tests/fuzz/corpus
