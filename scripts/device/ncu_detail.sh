#!/usr/bin/env bash
# Runs ON the GPU machine (bundle carried; unpacks it when /tmp/plumb-device is missing): the
# Nsight Compute views behind a kernel change, as text (the build machine has no ncu to open a
# report): for each NCU_KERNELS entry "regex:skip:count", `--set full` with source counters on
# the launches of the last decode step of a batch-NCU_BATCH run (default 1; the prefills before
# it are not profiled, so skip counts launches within that step), printed as the details page and
# the hottest SASS lines;
# then, with NCU_PREFILL=N, per-kernel durations of one N-token prefill (profile_summary.py).
#   NCU_KERNELS="sparse_attention_kernel:3:1 gemv_kernel:40:4" NCU_PREFILL=4096 scripts/device/ncu_detail.sh
set -uo pipefail
. scripts/device/bench_env.sh
bench=(plumb_bench --model "$CKPT" --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --batch "${NCU_BATCH:-1}"
       --context "${BENCH_CONTEXT:-64}" --steps 2 --prefill 0 --profile-last-step)
for spec in ${NCU_KERNELS:-}; do
  IFS=: read -r re skip count <<< "$spec"
  tag=$(echo "$re" | tr -c 'A-Za-z0-9_\n' '_')
  NCU_FROM_START=off ncu_full_report "$OUT/ncu-$tag.txt" "ncu-$tag" "$re" "${skip:-0}" "${count:-1}" "${NCU_TIMEOUT:-200}" "${bench[@]}"
  echo "ncu $re: $(grep -c 'Section: GPU Speed Of Light' "$OUT/ncu-$tag.txt") launches -> $OUT/ncu-$tag.txt"
done
if [ -n "${NCU_PREFILL:-}" ]; then
  # --steps 2 (the least plumb_bench takes) --batch 1 --context 8: the last forward of the run is the timed prefill
  ncu_kernel_times "$OUT/ncu-prefill$NCU_PREFILL.csv.gz" "${NCU_TIMEOUT:-200}" -- plumb_bench --model "$CKPT" \
    --backend cuda --numerics "${BENCH_NUMERICS:-faithful}" --batch 1 --context 8 --steps 2 --prefill "$NCU_PREFILL"
  python3 scripts/device/profile_summary.py "$OUT/ncu-prefill$NCU_PREFILL.csv.gz" > "$OUT/prof-prefill$NCU_PREFILL.txt"
  head -40 "$OUT/prof-prefill$NCU_PREFILL.txt"
fi
