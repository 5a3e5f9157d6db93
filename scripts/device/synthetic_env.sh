# Sourced by the device scripts that run on the 3-layer real-dims synthetic after check.sh has
# unpacked the bundle and written it: OUT, CKPT and the bundle's PATH; DeepSeek-V3's
# tokenizer.json beside the synthetic (its ids cover the synthetic's 129,280-entry vocabulary; the
# prompts are random ids, so the text does not matter). $1 names the caller in its error.
OUT=${OUT:-/tmp/plumb-results}; mkdir -p "$OUT"
CKPT=${CKPT:-/tmp/v4-flash-3layers}
dev=/tmp/plumb-device
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}" PATH="$dev/bin:$PATH"
[ -f "$CKPT/config.json" ] || { echo "$1: no synthetic at $CKPT (run STEPS=bench first)"; exit 1; }
if [ ! -f "$CKPT/tokenizer.json" ]; then
  tar -C /tmp -xJf tests/data/tokenizer/deepseek-v3-tokenizer.json.tar.xz && cp /tmp/deepseek-v3/tokenizer.json "$CKPT/"
fi
