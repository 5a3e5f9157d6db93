#!/usr/bin/env bash
# Bounded-memory check for `plumb convert` on a synthetic checkpoint with real V4-Flash dimensions
# (hidden 4096, 64 heads x 512, 2048-wide experts; 2 layers + MTP, 48 experts, 32K vocab: about
# 2.7 GB). Synthesizes it once, then runs cast (+experts), experts --to fp8 and shard --tp 8, each
# reporting size, wall time and peak RSS (plumb's getrusage line and /usr/bin/time's). Too big and
# slow for ctest. Needs ~20 GB free in WORKDIR; outputs are removed after measuring (KEEP=1 keeps).
# Usage: PLUMB=build/plumb scripts/convert-bigtest.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PLUMB=${PLUMB:-build/plumb}
WORK=${1:-/tmp/plumb-convert-bigtest}
mkdir -p "$WORK"

jq '.num_hidden_layers = 2 | .compress_ratios = [4, 128, 0] | .num_hash_layers = 1
    | .n_routed_experts = 48 | .vocab_size = 32768' tests/data/configs/deepseek-v4-flash.json > "$WORK/config.json"
if [ ! -d "$WORK/src" ]; then
  echo "== synth (once; holds the checkpoint in memory, unlike convert)"
  "$PLUMB" synth --config "$WORK/config.json" --out "$WORK/src"
fi
echo "source: $(du -sb "$WORK/src" | cut -f1) bytes in $WORK/src"

run() {  # name, plumb args...
  local name=$1
  shift
  echo "== $name: plumb $*"
  /usr/bin/time -f "time: %e s wall, max RSS %M KB (/usr/bin/time)" "$PLUMB" "$@" --no-progress --force
  local out=${*: -1}
  echo "output: $(du -sb "$out" | cut -f1) bytes"
  "$PLUMB" inspect "$out" | grep -E "binding|split rules|converted"
  [ "${KEEP:-0}" = 1 ] || rm -rf "$out"
}

run cast convert cast --to bf16 --experts "$WORK/src" "$WORK/bf16"
run experts convert experts --to fp8 "$WORK/src" "$WORK/fp8"
run shard convert shard --tp 8 "$WORK/src" "$WORK/tp8"
