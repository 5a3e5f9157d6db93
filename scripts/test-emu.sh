#!/usr/bin/env bash
# The GPU op harness on the CUDA emulator, without a GPU (docs/CORRECTNESS.md, "The CUDA
# emulator"): builds build-emu (scripts/build-emu.sh) and runs, in two gtest shards, the GPU tests
# that take under two minutes each there (most under one; SparseAttentionMmaWithinTheOrderFloor about
# three, alone in its shard most of that time): about 5 minutes on 2 cores. EMU_FILTER=<gtest filter> runs
# others ('Gpu*:*Gpu*': all of them, ~45 minutes on 2 cores); PLUMB_EMU_SHUFFLE=<seed> reorders blocks
# and threads. EMU_FLAVOR=hip: the emulator's HIP flavour instead (scripts/build-emu-hip.sh, into
# build-emu-hip): the same tests on the kernels compiled as for gfx90a (wave64, the MFMA tile).
# A check of kernel logic before a device lease, not a substitute for it.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK='GpuNumerics.*:GpuVersionText.*:GpuOps.CopyRow*:GpuOps.SparseAttentionInvisibleSelectionIsRefused'
QUICK+=':GpuOps.FullAndHostRoundTrip:GpuOps.RefusesTheBadCallsTheCpuRefuses:GpuOps.WindowUpdate:GpuOps.PagedWrite*'
QUICK+=':GpuOps.QuantFp8Fp4Hadamard:GpuOps.RopeAndInverse:GpuOps.CompressMultiStepRaggedDecode:GpuOps.RmsNorm*:GpuOps.NormActFp8CopyBitwise:GpuOps.NormRopeIsThreeOps'
QUICK+=':GpuOps.SideChain*:GpuOps.EmbedRepeatColumns:GpuOps.Route:GpuOps.IndexerTopKWithTies:GpuOps.HcPrePostHead:GpuOps.HcTokensInAGroupEqualAlone:GpuOps.HcPreNormIsTheTwoOps:GpuOps.HcHeadNormIsTheTwoOps:GpuOps.MoeGroupedOddShapes'
QUICK+=':GpuOps.SparseAttentionPvMmaWithinTheOrderFloor:GpuOps.SparseAttentionMmaWithinTheOrderFloor:GpuOps.SparseAttentionBf16Recent:GpuOps.MoeSmallEveryOption:GpuOps.GemvShapesEveryFormat:GpuOps.MlaAttention'
QUICK+=':GpuOps.LinearBf16WeightEveryPath:GpuOps.LinearF32MmaIsTheF32Product:GpuOps.LinearF32MmaPassesForTallWeights:GpuOps.LinearFp8TensorCores'
QUICK+=':GpuOps.MoeTensorCoresEveryOption:GpuOps.MoeTensorCoresShapesBitwise:GpuOps.MoeGroupedCombineIsTheCpuOrderBitwise:GpuOps.LinearBf16GemmPipelinedIsBitwise:GpuOps.LinearXPartsIsTheF32Product'
QUICK+=':GpuCpuOrder.RmsNorm:GpuCpuOrder.NormRope:GpuCpuOrder.RouteGate:GpuCpuOrder.MlaAttention:Numerics/GpuCpuOrderShapes.*/faithful'
case ${EMU_FLAVOR:-cuda} in
  cuda) build=scripts/build-emu.sh; BUILD_DIR=${BUILD_DIR:-build-emu} ;;
  hip)
    build=scripts/build-emu-hip.sh; BUILD_DIR=${BUILD_DIR:-build-emu-hip}
    # The HIP-only check of the MFMA tile (its run-time fallback fails it), less the paths HIP does not
    # have (they skip there by design: path (f), the FP8 and the MoE tensor cores, path (c)'s
    # pipelined k-loop).
    QUICK+=':GpuOps.LinearMatrixTileTakesNoFallback'
    QUICK+='-GpuOps.LinearF32MmaIsTheF32Product:GpuOps.LinearF32MmaPassesForTallWeights:GpuOps.LinearFp8TensorCores:GpuOps.MoeTensorCoresEveryOption:GpuOps.MoeTensorCoresShapesBitwise'
    QUICK+=':GpuOps.LinearBf16GemmPipelinedIsBitwise'
    ;;
  *) echo "test-emu: EMU_FLAVOR is '$EMU_FLAVOR': expected 'cuda' (the default) or 'hip'"; exit 1 ;;
esac
FILTER=${EMU_FILTER:-$QUICK}
BUILD_DIR=$BUILD_DIR "$build"
bin=$BUILD_DIR/tests/plumb_tests
log=$(mktemp -d)
pids=()
for i in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i "$bin" --gtest_filter="$FILTER" >"$log/shard$i.txt" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
grep -hE '^\[ +(OK|FAILED|SKIPPED) ' "$log"/shard*.txt | sort -k4 || true
ok=$(awk '/^\[ +OK \] .* \([0-9]+ ms\)$/ {n++} END {print n+0}' "$log"/shard*.txt)
# (awk, not grep -c: no match is no error under pipefail; "(N ms)" skips gtest's summary list)
skipped=$(awk '/^\[ +SKIPPED \] [A-Za-z].* \([0-9]+ ms\)$/ {n++} END {print n+0}' "$log"/shard*.txt)
if [ $rc -ne 0 ]; then
  echo "test-emu: failures (full logs in $log):"
  grep -hE -B20 '^\[  FAILED  \]' "$log"/shard*.txt | head -200
  exit 1
fi
# A selected test that skips or a filter that selects none ran nothing: not a pass.
if [ "$skipped" -ne 0 ] || [ "$ok" -eq 0 ]; then
  echo "test-emu: $skipped selected tests skipped, $ok passed: the emulator ran less than it was asked (logs in $log)"
  exit 1
fi
echo "test-emu: $ok GPU tests passed on the emulator, none failed or skipped (logs in $log)"
