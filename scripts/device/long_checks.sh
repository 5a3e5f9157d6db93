#!/usr/bin/env bash
# Runs ON the GPU machine (bundle carried), best right after quick_round.sh in the same warm lease
# (it reuses /tmp/plumb-device and the synthetic at $CKPT): the long checks that leave the GPU
# mostly idle, side by side, each under its own timeout, logs in $OUT/long.tgz:
#   RACE_FILTER   compute-sanitizer racecheck, one process per test of this gtest filter (issue 19
#                 item 4: racecheck serializes shared-memory accesses, one test can take minutes);
#                 RACE_SHARDS=n: n processes per test, each running a share of its cases
#                 (PLUMB_TEST_CASES=k/n, the long per-case loops of tests/backend/gpu_test_util.h);
#                 RACE_ONLY=regex: only the processes whose name (Suite.Test.k-of-n) matches it,
#                 e.g. the shares an earlier run's limit cut
#   KVQ_CONTEXTS  plumb_kv_quality on $KVQ_IDS random ids of the synthetic at these contexts
#                 (issue 15 item 7), Markdown kvq.md in the tarball
#   STEP17=1      the release's inference code on the block-aligned fixture (issue 13 item 1; carry
#                 .device/inference), record step17/ in the tarball
# LONG_TIMEOUT bounds every job (default 500 s). Prints a summary last.
set -uo pipefail
source scripts/device/round_env.sh long
limit=${LONG_TIMEOUT:-500}
declare -A jobs=()
if [ -n "${RACE_FILTER:-}" ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  shards=${RACE_SHARDS:-1}
  for t in $(plumb_tests --gtest_list_tests --gtest_filter="$RACE_FILTER" | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
    for k in $(seq 0 $((shards - 1))); do
      name="$t"; [ "$shards" -gt 1 ] && name="$t.$k-of-$shards"
      [[ -z "${RACE_ONLY:-}" || "$name" =~ $RACE_ONLY ]] || continue
      log="$OUT/race-$(echo "$name" | tr -c 'A-Za-z0-9_.\n-' _).log"
      PLUMB_TEST_CASES=$([ "$shards" -gt 1 ] && echo "$k/$shards") timeout "$limit" "$cs" --tool racecheck \
        --error-exitcode 9 plumb_tests --gtest_filter="$t" > "$log" 2>&1 &
      jobs[race $name]=$!
    done
  done
fi
# The synthetic is written here when an earlier call on this machine has not (a fresh machine).
if [ -n "${KVQ_CONTEXTS:-}" ] && [ ! -f "$CKPT/config.json" ]; then
  plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > "$OUT/synth.log" 2>&1 ||
    tail -2 "$OUT/synth.log"
fi
if [ -n "${KVQ_CONTEXTS:-}" ] && [ -f "$CKPT/config.json" ]; then
  timeout "$limit" plumb_kv_quality --model "$CKPT" --backend cuda --numerics "${KVQ_NUMERICS:-reference}" \
    --random-ids "${KVQ_IDS:-65536}" --contexts "$KVQ_CONTEXTS" --chunk "${KVQ_CHUNK:-2048}" \
    --markdown "$OUT/kvq.md" --json "$OUT/kvq.json" > "$OUT/kvq.log" 2>&1 &
  jobs[kv-quality]=$!
fi
if [ "${STEP17:-0}" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout "$limit" python3 tools/golden/release_step17.py --release-dir .device/inference \
    --ckpt tests/data/golden/v4-release/aligned --out "$OUT/step17" > "$OUT/step17.log" 2>&1 &
  jobs[step17]=$!
fi
for name in "${!jobs[@]}"; do
  wait "${jobs[$name]}"
  rc=$?
  detail=""
  case $name in
    race*) log="$OUT/race-$(echo "${name#race }" | tr -c 'A-Za-z0-9_.\n-' _).log"
           detail="$(grep -m1 -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$log") $(grep -m1 -E '^\[  (PASSED|FAILED) ' "$log")" ;;
    kv-quality) detail="$(tail -1 "$OUT/kvq.log")" ;;
    step17) detail="$(tail -1 "$OUT/step17.log")" ;;
  esac
  echo "$name rc=$rc $detail"
done > "$OUT/long-summary.unsorted"  # (not piped: wait must run in this shell, the jobs' parent)
sort "$OUT/long-summary.unsorted" | tee "$OUT/long-summary.txt"
pack_round long-summary.txt
