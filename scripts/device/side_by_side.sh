#!/usr/bin/env bash
# Runs ON the GPU machine with the bundle carried, and .peer too (scripts/device/peer_pack.sh). The
# tree, a full bundle and the kit are over the device tool's 64 MiB since v30 (refused at 63.4 MiB
# by its count): bundle only what this needs, `BUNDLE_BINS=bench/plumb_bench scripts/device/bundle.sh`
# (3.3 MB). Prepares the llama.cpp peer when this machine has not yet (scripts/device/peer_run.sh
# prep: its build and the L-layer real-dims synthetic at /tmp/v4peer/ckpt-L$L, ~260-440 s), then
# llama-bench's pp/tg on that checkpoint, then plumb_bench on the very same safetensors, one after
# the other (issue 17: every ratio to a peer measured in one lease). Prints both and the ratios; logs in $OUT/side.tgz.
#   SIDE_BATCH=1,8,32 SIDE_PREFILL=4096 SIDE_CONTEXT=512 L=6 scripts/device/side_by_side.sh
set -uo pipefail
source scripts/device/round_env.sh side
L=${L:-6}
peer=/tmp/v4peer
if { [ ! -f "$peer/kit/run_llamacpp.sh" ] || [ ! -f "$peer/ckpt-L$L/config.json" ]; } && [ -f .peer/run_llamacpp.sh ]; then
  L=$L scripts/device/peer_run.sh prep > "$OUT/prep.log" 2>&1
  echo "peer prep: rc=$? ($(tail -1 "$OUT/prep.log"))"
  grep -q RESUME "$OUT/prep.log" && { echo "side_by_side: the peer's prep asks to be resumed: run this again at once"; exit 2; }
fi
[ -f "$peer/kit/run_llamacpp.sh" ] || { echo "side_by_side: no peer kit at $peer/kit (run scripts/device/peer_run.sh first, same lease)"; exit 2; }
[ -f "$peer/ckpt-L$L/config.json" ] || { echo "side_by_side: no peer checkpoint at $peer/ckpt-L$L"; exit 2; }
DEADLINE=${PEER_DEADLINE:-240} L=$L OUT="$OUT/llama" bash "$peer/kit/run_llamacpp.sh" bench > "$OUT/llama.log" 2>&1
echo "llama.cpp: rc=$?"; cat "$OUT/llama/summary.md" 2>/dev/null || tail -5 "$OUT/llama.log"
timeout "${SIDE_TIMEOUT:-300}" plumb_bench --model "$peer/ckpt-L$L" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" \
  --batch "${SIDE_BATCH:-1,8,32}" --context "${SIDE_CONTEXT:-512}" --steps "${BENCH_STEPS:-10}" \
  --prefill "${SIDE_PREFILL:-4096}" --json "$OUT/plumb.json" > "$OUT/plumb.log" 2>&1
echo "plumb: rc=$?"
grep -E '^\| [0-9]+ \| (step \(no|head)|prefill|copy bandwidth' "$OUT/plumb.log"
# Ratios: plumb's tokens/s over llama.cpp's, decode at batch 1 (tg) and prefill (pp of the same length).
python3 - "$OUT/llama/llama-bench.json" "$OUT/plumb.json" <<'PY' | tee "$OUT/side.md"
import json, sys
try:
    peer = json.load(open(sys.argv[1]))
    mine = json.load(open(sys.argv[2]))
except (OSError, ValueError) as e:
    sys.exit(f"side_by_side: no ratios ({e})")
tg = [r for r in peer if r["n_prompt"] == 0 and r.get("n_depth", 0) == 0]
pp = {r["n_prompt"]: r for r in peer if r["n_gen"] == 0 and r.get("n_depth", 0) == 0}
b1 = [d for d in mine["decode"] if d["batch"] == 1]
print("| measure | plumb | llama.cpp | plumb / llama.cpp |\n|---|---:|---:|---:|")
if tg and b1:
    mine_ts, best = 1e3 / b1[0]["step_ms"], max(r["avg_ts"] for r in tg)
    print(f"| decode B = 1, tokens/s | {mine_ts:.1f} | {best:.1f} | {mine_ts / best:.2f} |")
n = mine["prefill"]["tokens"]
if n in pp:
    best = max(r["avg_ts"] for r in peer if r["n_prompt"] == n and r["n_gen"] == 0)
    print(f"| prefill {n}, tokens/s | {mine['prefill']['tokens_per_s']:.0f} | {best:.0f} | {mine['prefill']['tokens_per_s'] / best:.2f} |")
print(f"(copy bandwidth {mine['copy_gbs']:.0f} GB/s, {mine['facts']['device']})")
PY
pack_round side.md
