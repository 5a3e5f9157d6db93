#!/usr/bin/env bash
# Runs ON the GPU machine after check.sh has unpacked the bundle (or by itself: it unpacks when
# /tmp/plumb-device is missing): per-kernel durations of plumb_bench decode steps on the 3-layer
# real-dims synthetic with Nsight Compute (the device machine has no Nsight Systems), summarised
# for the last decode step by profile_summary.py. The "where does a step go" record behind
# docs/PERF.md, not a benchmark (ncu serializes kernels at base clocks with cold caches).
set -uo pipefail
. scripts/device/bench_env.sh
for B in ${PROFILE_BATCH:-1}; do
  # only the last decode step of batch B is captured (--profile-last-step)
  ncu_kernel_times "$OUT/ncu-b$B${PROFILE_TAG:-}.csv.gz" "${PROFILE_TIMEOUT:-240}" --profile-from-start off -- \
    plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --batch "$B" \
    --context "${BENCH_CONTEXT:-64}" --steps 2 --prefill 0 --profile-last-step ${BENCH_EXTRA:-}
  python3 scripts/device/profile_summary.py "$OUT/ncu-b$B${PROFILE_TAG:-}.csv.gz" | tee "$OUT/prof-b$B${PROFILE_TAG:-}.txt"
done
