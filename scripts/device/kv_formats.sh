#!/usr/bin/env bash
# Runs ON the GPU machine after check.sh (or profile.sh) has unpacked the bundle and written the
# 3-layer synthetic: what each KV storage format costs a decode step (plumb_bench --kv-dtype /
# --kv-index-dtype), the formats in one lease. Table to $OUT/kv-formats.txt.
#   KV_FORMATS="fp8:fp4 f32:f32 bf16:bf16 fp8:f32 f32:fp4"  KV_BATCH=1,8
set -uo pipefail
. "$(dirname "$0")/synthetic_env.sh" kv_formats
for f in ${KV_FORMATS:-fp8:fp4 f32:f32 bf16:bf16 fp8:f32 f32:fp4}; do
  echo "== KV entries ${f%%:*}, indexer keys ${f##*:}"
  timeout 200 plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --batch "${KV_BATCH:-1,8}" \
    --context "${BENCH_CONTEXT:-512}" --steps "${BENCH_STEPS:-10}" --prefill 0 --kv-dtype "${f%%:*}" --kv-index-dtype "${f##*:}" 2>&1 |
    grep -vE '^(loading|batch [0-9]+: prefill)'
done | tee "$OUT/kv-formats.txt"
