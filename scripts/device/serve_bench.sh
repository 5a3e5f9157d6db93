#!/usr/bin/env bash
# Runs ON the GPU machine after check.sh has unpacked the bundle and bench.sh has written the
# 3-layer real-dims synthetic: `plumb serve` on it (with DeepSeek-V3's tokenizer.json, whose ids
# cover the synthetic's 129,280-entry vocabulary; prompts are random token ids, so the text does
# not matter) and `plumb bench serve` against it at a few concurrencies. Results:
# $OUT/serve_bench.json, the table on stdout, the server's log in $OUT/serve.log.
set -uo pipefail
. "$(dirname "$0")/synthetic_env.sh" serve_bench
port=${SERVE_PORT:-8123}
plumb serve --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --port "$port" \
  ${SERVE_FLAGS:-} > "$OUT/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 240); do  # the ready line comes once the model is loaded
  grep -q "http://" "$OUT/serve.log" && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.5
done
grep -q "http://" "$OUT/serve.log" || { echo "serve_bench: the server did not come up"; tail -20 "$OUT/serve.log"; kill $pid; exit 1; }
plumb bench serve --url "http://127.0.0.1:$port" --dataset random --random-input-len "${SB_INPUT:-256}" \
  --random-output-len "${SB_OUTPUT:-64}" --num-prompts "${SB_PROMPTS:-16}" --max-concurrency "${SB_CONCURRENCY:-1,4,16}" \
  --ignore-eos --warmup 1 --random-vocab-size 129000 --result-json "$OUT/serve_bench.json"
rc=$?
kill -TERM $pid; wait $pid
exit $rc
