#!/usr/bin/env bash
# Runs ON the GPU machine (called by scripts/device/check.sh with STEPS=bench, or by hand after
# unpacking the bundle): measures the device's own ceilings through PyTorch (copy bandwidth,
# bf16 matrix rate), writes a synthetic checkpoint with the REAL V4-Flash dimensions but three
# layers (SWA, CSA, HCA; bench/configs/v4-flash-3layers.json; random weights in the official FP8 /
# FP4 formats), and runs plumb_bench on it. Results: $OUT/bench.json, the table on stdout.
set -uo pipefail
OUT=${OUT:-/tmp/plumb-results}
CKPT=${CKPT:-/tmp/v4-flash-3layers}
mkdir -p "$OUT"
python3 - <<'PY' 2>&1 | tee "$OUT/ceilings.txt"
import torch
def med(f, n=10):
    for _ in range(3): f()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]
x = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
ms = med(lambda: y.copy_(x))
print(f"torch copy: {2 * x.numel() / ms / 1e6:.0f} GB/s (read+write)")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
ms = med(lambda: a @ b)
print(f"torch bf16 8192^3: {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s")
PY
if [ ! -f "$CKPT/config.json" ]; then
  start=$(date +%s)
  plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > "$OUT/synth.log" 2>&1 || { tail "$OUT/synth.log"; exit 1; }
  echo "synth: $(du -sh "$CKPT" | cut -f1) in $(( $(date +%s) - start )) s"
fi
plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --batch "${BENCH_BATCH:-1,8,32}" \
  --context "${BENCH_CONTEXT:-512}" --steps "${BENCH_STEPS:-10}" --prefill "${BENCH_PREFILL:-4096}" ${BENCH_EXTRA:-} --json "$OUT/bench.json"
