#!/usr/bin/env bash
# Runs ON the GPU machine after check.sh has unpacked the bundle (or by itself: it unpacks when
# /tmp/plumb-device is missing). Profiles decode steps of plumb_bench on the 3-layer real-dims
# synthetic with Nsight Systems and prints, for the decode phase only (the last PROFILE_STEPS
# steps), the kernel time per step by kernel, the launch count, GPU busy time vs wall time.
# This is the "where does a step go" record behind docs/PERF.md, not a benchmark.
set -uo pipefail
OUT=${OUT:-/tmp/plumb-results}; mkdir -p "$OUT"
CKPT=${CKPT:-/tmp/v4-flash-3layers}
dev=/tmp/plumb-device
[ -x $dev/bin/plumb_bench ] || { mkdir -p $dev && tar -C $dev -xJf .device/bundle.tar.xz; }
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}" PATH="$dev/bin:$PATH"
[ -f "$CKPT/config.json" ] || plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > /tmp/synth.log 2>&1
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[ -n "$nsys" ] || { echo "profile: no nsys on this machine"; exit 3; }
for B in ${PROFILE_BATCH:-1}; do
  rep=/tmp/prof-b$B  # the report stays on the device: only the summary comes back
  $nsys profile -t cuda -o "$rep" --force-overwrite true plumb_bench --model "$CKPT" --backend cuda \
    --numerics "${BENCH_NUMERICS:-faithful}" --batch "$B" --context "${BENCH_CONTEXT:-256}" \
    --steps "${PROFILE_STEPS:-8}" --prefill 0 > /tmp/prof-b$B.log 2>&1 || { tail /tmp/prof-b$B.log; continue; }
  $nsys export --type sqlite -o "$rep.sqlite" --force-overwrite true "$rep.nsys-rep" > /dev/null 2>&1
  python3 scripts/device/profile_summary.py "$rep.sqlite" --steps "${PROFILE_STEPS:-8}" --batch "$B" | tee "$OUT/prof-b$B.txt"
  rm -f "$rep.nsys-rep"
done
