#!/usr/bin/env bash
# Runs ON the GPU machine after check.sh has unpacked the bundle and written the 3-layer real-dims
# synthetic (STEPS=bench, or profile.sh): plumb_engine_bench on it (issue #15 item 8, GPU):
# output tokens/s, TTFT, TPOT and ITL by max concurrency, then FCFS vs SRPT on the mixed
# workload. DeepSeek-V3's tokenizer.json goes beside the synthetic (its ids cover the synthetic's
# 129,280-entry vocabulary; the prompts are random ids). Records: $OUT/engine-bench.json and
# $OUT/engine-schedulers.json, the tables on stdout.
#   EB_REQUESTS=64 EB_INPUT=128:512 EB_OUTPUT=32:64 EB_CONCURRENCY=1,8,32,64
set -uo pipefail
. "$(dirname "$0")/synthetic_env.sh" engine_bench
common=(--model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --kv-cache-mb "${EB_KV_MB:-16384}")
timeout "${EB_TIMEOUT:-300}" plumb_engine_bench "${common[@]}" --requests "${EB_REQUESTS:-64}" \
  --input-len "${EB_INPUT:-128:512}" --output-len "${EB_OUTPUT:-32:64}" --concurrency "${EB_CONCURRENCY:-1,8,32,64}" \
  --max-seqs 64 --json "$OUT/engine-bench.json"
timeout "${EB_TIMEOUT:-300}" plumb_engine_bench "${common[@]}" --requests "${EB_REQUESTS:-64}" --compare-schedulers \
  --max-seqs 64 --json "$OUT/engine-schedulers.json"
