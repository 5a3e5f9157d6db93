#!/usr/bin/env bash
# The openai npm client tests (tests/server/node) against BUILD_DIR/plumb (argument 1, default
# build): `npm ci` from the registry with the committed lockfile, then node's test runner, bounded
# in time. Every test must pass: a failure or a skipped test fails this script. Without node or
# npm it says so and passes (the CI machines have both).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
log="$BUILD_DIR/openai-client.log"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "test.sh: openai client tests SKIPPED: node or npm is not installed"
  exit 0
fi
start=$(date +%s)
case "$BUILD_DIR" in /*) binary="$BUILD_DIR/plumb" ;; *) binary="$(pwd)/$BUILD_DIR/plumb" ;; esac
set +e
(
  cd tests/server/node &&
    timeout 300 npm ci --no-audit --no-fund --loglevel=error &&
    PLUMB_BINARY="$binary" timeout 300 node --test --test-timeout=120000 openai_client.test.mjs
) > "$log" 2>&1
rc=$?
set -e
summary=$(grep -E '^# (tests|pass|fail|skipped|cancelled) ' "$log" | awk '{printf "%s %s, ", $2, $3}' | sed 's/, $//')
if [ "$rc" -ne 0 ] || ! grep -qE '^# fail 0$' "$log" || ! grep -qE '^# skipped 0$' "$log" || ! grep -qE '^# cancelled 0$' "$log"; then
  tail -80 "$log"
  echo "test.sh: openai client tests FAILED (exit $rc; ${summary:-no summary}): see $log"
  exit 1
fi
echo "test.sh: openai client tests: $summary in $(( $(date +%s) - start )) s"
