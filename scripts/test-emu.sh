#!/usr/bin/env bash
# The GPU op harness on the CUDA emulator, without a GPU (docs/CORRECTNESS.md, "The CUDA
# emulator"): builds build-emu (scripts/build-emu.sh) and runs, in two gtest shards, the GPU tests
# that take under a minute each there: about 3 minutes on 2 cores. EMU_FILTER=<gtest filter> runs
# others ('Gpu*:*Gpu*': all 68, ~45 minutes on 2 cores); PLUMB_EMU_SHUFFLE=<seed> reorders blocks
# and threads. A check of kernel logic before a device lease, not a substitute for it.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK='GpuNumerics.*:GpuVersionText.*:GpuOps.CopyRow*:GpuOps.SparseAttentionInvisibleSelectionIsRefused'
QUICK+=':GpuOps.FullAndHostRoundTrip:GpuOps.RefusesTheBadCallsTheCpuRefuses:GpuOps.WindowUpdate:GpuOps.PagedWrite*'
QUICK+=':GpuOps.QuantFp8Fp4Hadamard:GpuOps.RopeAndInverse:GpuOps.CompressMultiStepRaggedDecode:GpuOps.RmsNorm*'
QUICK+=':GpuOps.EmbedRepeatColumns:GpuOps.Route:GpuOps.IndexerTopKWithTies:GpuOps.HcPrePostHead:GpuOps.MoeGroupedOddShapes'
QUICK+=':GpuOps.SparseAttentionBf16Recent:GpuOps.MoeSmallEveryOption:GpuOps.GemvShapesEveryFormat:GpuOps.MlaAttention'
QUICK+=':GpuOps.LinearBf16WeightEveryPath:GpuOps.LinearF32MmaIsTheF32Product:GpuOps.LinearFp8TensorCores'
QUICK+=':GpuCpuOrder.RmsNorm:GpuCpuOrder.RouteGate:GpuCpuOrder.MlaAttention:Numerics/GpuCpuOrderShapes.*/faithful'
FILTER=${EMU_FILTER:-$QUICK}
BUILD_DIR=${BUILD_DIR:-build-emu} scripts/build-emu.sh
bin=${BUILD_DIR:-build-emu}/tests/plumb_tests
log=$(mktemp -d)
pids=()
for i in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i "$bin" --gtest_filter="$FILTER" >"$log/shard$i.txt" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
grep -hE '^\[ +(OK|FAILED|SKIPPED) ' "$log"/shard*.txt | sort -k4 || true
if [ $rc -ne 0 ]; then
  echo "test-emu: failures (full logs in $log):"
  grep -hE -B20 '^\[  FAILED  \]' "$log"/shard*.txt | head -200
  exit 1
fi
echo "test-emu: every selected GPU test passed on the emulator (logs in $log)"
