# Sourced ON the GPU machine by the scripts that run Nsight Compute (bench_env.sh for profile.sh and
# ncu_detail.sh; quick_round.sh): $ncu, and the two ways they run it.
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)

# ncu_kernel_times OUT.csv.gz TIMEOUT [ncu flags...] -- COMMAND...: every kernel's duration at the
# lease's clocks, as ncu's CSV, gzipped (profile_summary.py reads it).
ncu_kernel_times() {
  local out=$1 limit=$2 flags=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  timeout "$limit" "$ncu" --clock-control none "${flags[@]}" --metrics gpu__time_duration.sum --csv --print-units base \
    "$@" 2>/dev/null | gzip > "$out"
}

# ncu_full_report OUT.txt TAG REGEX SKIP COUNT TIMEOUT COMMAND...: the full section set with source
# counters on COUNT launches of the kernels matching REGEX after SKIP of them, as text (the details
# page, then the hottest SASS lines by stall samples); the run's own output beside it (.run.log).
# NCU_FROM_START=off: only what the command marks is profiled (plumb_bench --profile-last-step).
ncu_full_report() {
  local out=$1 tag=$2 re=$3 skip=$4 count=$5 limit=$6
  shift 6
  timeout "$limit" "$ncu" --clock-control none --profile-from-start "${NCU_FROM_START:-on}" --set full --import-source yes \
    -k "regex:$re" -s "$skip" -c "$count" \
    -f -o "/tmp/$tag" "$@" > "${out%.txt}.run.log" 2>&1
  { "$ncu" -i "/tmp/$tag.ncu-rep" --page details --print-units base
    echo "=== hottest SASS lines (stall samples)"
    "$ncu" -i "/tmp/$tag.ncu-rep" --page source --csv --print-source sass 2>/dev/null \
      | python3 scripts/device/ncu_hot_lines.py --top "${NCU_TOP:-40}"
  } > "$out" 2>&1
}
