#!/usr/bin/env bash
# README command (b): install dependencies, build, run the whole test suite, print the count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
start=$(date +%s)
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" 2>&1 | tee "$BUILD_DIR/ctest.log"
rc=${PIPESTATUS[0]}
set -e
echo "test.sh: $(grep -E 'tests passed|tests failed' "$BUILD_DIR/ctest.log" | tail -1) in $(( $(date +%s) - start )) s"
exit $rc
