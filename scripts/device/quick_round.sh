#!/usr/bin/env bash
# Runs ON the GPU machine (bundle carried): the shortest check-and-time round for a kernel change
# when little device time is left. The synthetic checkpoint is written in the background while
# the op tests run in QUICK_SHARDS gtest shards side by side (the op tests leave the GPU mostly
# idle), then one bench of the batches in QUICK_BATCH and a prefill of QUICK_PREFILL tokens.
# Prints a summary last; logs in $OUT/quick.tgz (scores.txt: every op comparison's score and bar).
#   QUICK_FILTER='GpuOps*:GpuCpuOrder*' QUICK_BATCH=1,32 QUICK_PREFILL=4096 scripts/device/quick_round.sh
# QUICK_AB (below) repeats the bench under switches for an A/B in the same lease (QUICK_PREFILL_ALL=1
# the prefill with every position's logits); QUICK_OPS times
# op-bench cases, QUICK_NCU profiles one op-bench launch, QUICK_PROFILE times the kernels of a
# decode step with ncu.
set -uo pipefail
source scripts/device/round_env.sh quick
source scripts/device/ncu_lib.sh
cat $dev/BUILD
synth=""
if [ ! -f "$CKPT/config.json" ]; then
  plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > "$OUT/synth.log" 2>&1 &
  synth=$!
fi
shards=${QUICK_SHARDS:-4}
pids=()
for i in $(seq 0 $((shards - 1))); do
  PLUMB_TEST_SCORES=1 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${QUICK_TEST_TIMEOUT:-240}" plumb_tests \
    --gtest_filter="${QUICK_FILTER:-GpuOps*:GpuCpuOrder*}" > "$OUT/ops-$i.log" 2>&1 &
  pids+=($!)
done
rcs=""
for p in "${pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
grep -h -E '^\[  FAILED  \] [A-Za-z]' "$OUT"/ops-*.log | sort -u | head -20
passed=$(grep -hoE '^\[  PASSED  \] [0-9]+' "$OUT"/ops-*.log | awk '{s+=$4} END {print s+0}')
failed=$(grep -hoE '^\[  FAILED  \] [0-9]+ test' "$OUT"/ops-*.log | awk '{s+=$4} END {print s+0}')
skipped=$(grep -hoE '^\[  SKIPPED \] [0-9]+' "$OUT"/ops-*.log | awk '{s+=$4} END {print s+0}')
# Every op comparison's score beside its bar (PLUMB_TEST_SCORES): the measured floors.
grep -h '^score ' "$OUT"/ops-*.log | sed 's/ \[seed [0-9]*, replay with PLUMB_TEST_SEED=[0-9]*\]$//' | sort -k5 > "$OUT/scores.txt"
[ -n "$synth" ] && { wait "$synth" || tail -2 "$OUT/synth.log"; }
bench="not run"
if [ -f "$CKPT/config.json" ] && [ -n "${QUICK_BATCH-1,32}" ]; then
  timeout "${QUICK_BENCH_TIMEOUT:-150}" plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" \
    --batch "${QUICK_BATCH:-1,32}" --context "${BENCH_CONTEXT:-512}" --steps "${BENCH_STEPS:-10}" \
    --prefill "${QUICK_PREFILL:-4096}" --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  bench="rc=$?"
  grep -E '^\| [0-9]+ \| (step|head)|prefill|copy bandwidth' "$OUT/bench.log"
fi
# QUICK_PREFILL_ALL=1: the prefill once more with every position's logits (plumb_bench
# --prefill-all-logits, the measurement before PERF.md v21), for the head's share in this lease.
if [ "${QUICK_PREFILL_ALL:-0}" = 1 ] && [ -f "$CKPT/config.json" ]; then
  timeout "${QUICK_AB_TIMEOUT:-90}" plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" \
    --batch 1 --context 64 --steps 2 --prefill "${QUICK_PREFILL:-4096}" --prefill-all-logits > "$OUT/bench-all-logits.log" 2>&1
  echo "prefill with every position's logits: rc=$?"; grep -E '^prefill' "$OUT/bench-all-logits.log"
fi
# A/B: the same bench again under each switch of QUICK_AB ('A=x;B=y C=z': one bench per entry, an
# entry's assignments together), batches QUICK_AB_BATCH, e.g. QUICK_AB='PLUMB_GPU_FP8_DECODE=int;PLUMB_GPU_MOE=per-expert'.
IFS=';' read -ra switches <<< "${QUICK_AB:-}"
for sw in "${switches[@]}"; do
  [ -f "$CKPT/config.json" ] && [ -n "$sw" ] || continue
  tag=$(echo "$sw" | tr -c 'A-Za-z0-9=\n_-' _ | tr = -)
  env $sw timeout "${QUICK_AB_TIMEOUT:-90}" plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" \
    --batch "${QUICK_AB_BATCH:-1,32}" --context "${BENCH_CONTEXT:-512}" --steps "${BENCH_STEPS:-10}" \
    --prefill "${QUICK_PREFILL:-4096}" --json "$OUT/bench-$tag.json" > "$OUT/bench-$tag.log" 2>&1
  echo "A/B $sw: rc=$?"
  grep -E '^\| [0-9]+ \| (step|head)|prefill' "$OUT/bench-$tag.log"
done
# QUICK_OPS: op-bench filters ('a;b'), each timed plainly and under every QUICK_AB switch
# (plumb_bench --ops: per-shape microseconds and GB/s; e.g. 'linear_decode').
IFS=';' read -ra opfilters <<< "${QUICK_OPS:-}"
for f in "${opfilters[@]}"; do
  [ -n "$f" ] || continue
  for sw in "" "${switches[@]}"; do
    tag=$(echo "ops-$f-$sw" | tr -c 'A-Za-z0-9=\n_-' _ | tr = -)
    env $sw timeout "${QUICK_AB_TIMEOUT:-90}" plumb_bench --ops --backend cuda --filter "$f" > "$OUT/$tag.log" 2>&1
    echo "ops '$f' ${sw:-(default)}: rc=$?"; grep -E '^\| ' "$OUT/$tag.log" | tail -n +3
  done
done
# QUICK_NCU: 'filter|regex|skip' entries (';'-separated): Nsight Compute's full set with source
# counters on one launch of an op-bench case (the kernels matching regex, after skip of them), as
# text: the details page and the hottest SASS lines (ncu_hot_lines.py).
IFS=';' read -ra ncus <<< "${QUICK_NCU:-}"
for spec in "${ncus[@]}"; do
  IFS='|' read -r f re skip <<< "$spec"
  [ -n "$re" ] || continue
  tag=$(echo "ncu-$f" | tr -c 'A-Za-z0-9_\n-' _)
  ncu_full_report "$OUT/$tag.txt" "$tag" "$re" "${skip:-5}" 1 "${QUICK_NCU_TIMEOUT:-120}" \
    plumb_bench --ops --backend cuda --filter "$f" --reps 3
  echo "ncu '$f' $re: $(grep -E -m3 'Duration|DRAM Throughput|Issue Slots Busy' "$OUT/$tag.txt" | tr -s ' ' | tr '\n' ';')"
done
# QUICK_PROFILE: batch sizes whose last decode step ncu times kernel by kernel (warm caches, the
# lease's clocks: close to the kernels' share of the bench's step; profile_summary.py --list).
# Only that step is captured (--profile-last-step): profiling the B sequences' prefills first ran
# past the timeout at B = 8, and the summary then showed a prefill.
for B in ${QUICK_PROFILE:-}; do
  [ -f "$CKPT/config.json" ] || continue
  ncu_kernel_times "$OUT/ncu-b$B.csv.gz" "${QUICK_PROFILE_TIMEOUT:-150}" --cache-control none \
    --profile-from-start off -- plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" \
    --batch "$B" --context "${BENCH_CONTEXT:-512}" --steps 2 --prefill 0 --profile-last-step
  python3 scripts/device/profile_summary.py --list "$OUT/ncu-b$B.csv.gz" > "$OUT/prof-b$B.txt" 2>&1
  echo "profile B=$B:"; head -22 "$OUT/prof-b$B.txt"
done
echo "ops shards rc:$rcs; passed $passed, failed $failed, skipped $skipped; bench $bench" | tee "$OUT/summary.txt"
pack_round summary.txt
