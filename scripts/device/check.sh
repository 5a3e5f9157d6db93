#!/usr/bin/env bash
# Runs ON the GPU machine (device tool), from the repository root, with .device/bundle.tar.xz
# carried (made by scripts/device/bundle.sh). One call: unpack, GPU op harness, plumb verify on
# every committed fixture (reports under $OUT/verify-*), end-to-end greedy agreement, and
# optionally the benchmark. Prints a short summary last.
#   STEPS="ops verify hf golden-v3 determinism sanitize sanitize-ops bench portable" (default "ops verify"); GTEST_FILTER overrides the op
#   filter; MODES overrides the verify modes (reference faithful faithful-isolated
#   faithful-cpu-order: "-isolated" adds --isolate-layers, "-cpu-order" runs the GPU backend with
#   PLUMB_GPU_ORDER=cpu, "-sites=norm,hc" with only those sites in the CPU's order). golden-v3 runs tools/golden/make_v3_faithful.py on DeepSeek-V3's
#   released inference code, carried as .device/dsv3/inference (not part of the repository).
set -uo pipefail
# The device tool returns at most 8 files from $OUT: everything goes to a work folder, which is
# packed into $OUT/results.tar.gz at the end (plus summary.txt).
FINAL=${OUT:-/tmp/plumb-final}
OUT=/tmp/plumb-results
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"
root=$(pwd)
dev=/tmp/plumb-device
rm -rf "$dev" && mkdir -p "$dev" && tar -C "$dev" -xJf .device/bundle.tar.xz || { echo "no bundle"; exit 1; }
cat "$dev/BUILD"
scripts/fixtures.sh unpack || exit 1  # the golden fixtures' checkpoints and logits (committed as archives)
# The test binary has the build machine's source path compiled in (fixtures): make it resolve.
src=$(strings "$dev/bin/plumb_tests" | grep -m1 -oE '^/[^ ]*/tests/data$' | sed 's#/tests/data$##')
if [ -n "$src" ] && [ "$src" != "$root" ]; then mkdir -p "$(dirname "$src")"; ln -sfn "$root" "$src"; fi
# ... and the plumb binary it runs (PLUMB_BINARY, a build-tree path) be the bundle's.
bin=$(strings "$dev/bin/plumb_tests" | grep -m1 -oE '^/[^ ]*/plumb$')
if [ -n "$bin" ] && [ ! -e "$bin" ]; then mkdir -p "$(dirname "$bin")"; ln -sfn "$dev/bin/plumb" "$bin"; fi
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}"
export PATH="$dev/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
STEPS=${STEPS:-ops verify}
summary=()
# The benchmark's synthetic checkpoint takes ~160 s of CPU (plumb synth): written in the
# background from the start, while the GPU runs the steps before the benchmark.
CKPT=${CKPT:-/tmp/v4-flash-3layers}
synth_pid=""
if [[ " $STEPS " == *" bench "* || " $STEPS " == *" portable "* ]] && [ ! -f "$CKPT/config.json" ]; then
  plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > "$OUT/synth.log" 2>&1 &
  synth_pid=$!
fi
if [[ " $STEPS " == *" ops "* ]]; then
  PLUMB_GPU_SYNC=${PLUMB_GPU_SYNC:-1} timeout 300 plumb_tests --gtest_filter="${GTEST_FILTER:-GpuOps*:*Gpu*}" \
    --gtest_output=json:"$OUT/gpu_ops.json" > "$OUT/gpu_ops.log" 2>&1
  rc=$?
  grep -E '^\[  (FAILED|  OK|SKIPPED) ' "$OUT/gpu_ops.log" | grep -v '  OK ' | head -40
  summary+=("ops rc=$rc $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+' "$OUT/gpu_ops.log" | tr '\n' ' ')")
fi
if [[ " $STEPS " == *" verify "* ]]; then
  # every committed model fixture, with a prompt long enough to reach the compressed layers
  g=tests/data/golden
  fixtures=("tiny-v4 models/tiny-v4 $g/v4/tiny-a/prompt_259.ids.npy"
            "tiny-a $g/v4/tiny-a $g/v4/tiny-a/prompt_259.ids.npy"
            "tiny-b $g/v4/tiny-b $g/v4/tiny-b/prompt_259.ids.npy"
            "tiny-kjv models/tiny-kjv $g/v4/tiny-kjv/prompt_150.ids.npy"
            "v3-tiny-a $g/v3/tiny-a $g/v3/tiny-a/prompt_211.ids.npy"
            "v3-tiny-b $g/v3/tiny-b $g/v3/tiny-b/prompt_211.ids.npy")
  for f in "${fixtures[@]}"; do
    read -r name model ids <<< "$f"
    [ -n "${FIXTURES:-}" ] && [[ " $FIXTURES " != *" $name "* ]] && continue  # FIXTURES="tiny-kjv ...": only those
    # reference and faithful free-running, faithful also layer-isolated and with the GPU summing
    # in the CPU's order (bitwise); V3 also reference in the CPU's order (its MLA)
    modes="reference faithful faithful-isolated faithful-cpu-order"
    [[ $name == v3-* ]] && modes="$modes reference-cpu-order"
    for mode in ${MODES:-$modes}; do
      num=${mode%%-*}; extra=""; order=fast
      [[ $mode == *-isolated ]] && extra="--isolate-layers"
      [[ $mode == *-cpu-order ]] && order=cpu
      [[ $mode == *-sites=* ]] && order=${mode#*-sites=}  # e.g. faithful-sites=norm,hc: those in the CPU's order
      PLUMB_GPU_ORDER=$order timeout 300 plumb verify --model "$model" --backend cuda --against cpu --numerics "$num" \
        $extra --ids "$ids" --report "$OUT/verify-$name-$mode" > "$OUT/verify-$name-$mode.log" 2>&1
      summary+=("verify $name $mode rc=$? $(grep -m1 -iE 'first failing|verdict|pass' "$OUT/verify-$name-$mode.log")")
    done
  done
fi
if [[ " $STEPS " == *" hf "* ]]; then
  # the GPU backend against the HF transformers goldens (reference numerics)
  timeout 300 python3 scripts/device/hf_check.py > "$OUT/hf_check.log" 2>&1
  rc=$?
  grep FAIL "$OUT/hf_check.log" | head -20
  summary+=("hf rc=$rc $(tail -1 "$OUT/hf_check.log")")
fi
if [[ " $STEPS " == *" golden-v3 "* ]]; then
  # the V3 faithful golden from the release's own code (real triton kernels; the plain-torch
  # stand-ins as well when those fail, into another folder)
  rel=.device/dsv3/inference
  timeout 300 python3 tools/golden/make_v3_faithful.py --release-dir "$rel" --fixtures tests/data/golden/v3 \
    --out "$OUT/v3-faithful" > "$OUT/golden-v3.log" 2>&1
  rc=$?
  tail -15 "$OUT/golden-v3.log"
  if [ $rc -ne 0 ]; then
    timeout 300 python3 tools/golden/make_v3_faithful.py --release-dir "$rel" --fixtures tests/data/golden/v3 \
      --standin-kernels --out "$OUT/v3-faithful-standin" > "$OUT/golden-v3-standin.log" 2>&1
    summary+=("golden-v3 rc=$rc, stand-in kernels rc=$?")
  else
    summary+=("golden-v3 rc=0")
  fi
fi
if [[ " $STEPS " == *" determinism "* ]]; then
  # The GPU in the CPU's reduction order must give the same bits every run, and the CPU's bits:
  # REPEAT runs of `plumb logits` per fixture and numerics, compared byte for byte (cmp).
  # .device/race/config.json (carried, optional): a block-aligned V4 config, synthesized here.
  g=tests/data/golden
  fx=("v4-tiny-a $g/v4/tiny-a $g/v4/tiny-a/prompt_64.ids.npy" "v4-tiny-b $g/v4/tiny-b $g/v4/tiny-b/prompt_7.ids.npy"
      "v3-tiny-a $g/v3/tiny-a $g/v3/tiny-a/prompt_64.ids.npy" "v3-tiny-b $g/v3/tiny-b $g/v3/tiny-b/prompt_7.ids.npy")
  if [ -f .device/race/config.json ]; then
    plumb synth --config .device/race/config.json --out /tmp/race-v4 --force > "$OUT/race-synth.log" 2>&1 \
      && fx+=("v4-aligned /tmp/race-v4 $g/v4/tiny-a/prompt_7.ids.npy" "v4-aligned-64 /tmp/race-v4 $g/v4/tiny-a/prompt_64.ids.npy")
  fi
  # .device/race/probe (carried, optional): a V3 checkpoint with the dims of issue 13 item 3
  # (tools/golden/make_v3_fixtures.py --configs probe --no-hf --out .device/race)
  [ -d .device/race/probe ] && fx+=("v3-probe-3 .device/race/probe $g/v3/tiny-a/prompt_3.ids.npy"
                                    "v3-probe-64 .device/race/probe $g/v3/tiny-a/prompt_64.ids.npy")
  d=/tmp/determinism; rm -rf $d; mkdir -p $d
  for f in "${fx[@]}"; do
    read -r name model ids <<< "$f"
    for num in reference faithful; do
      plumb logits --model "$model" --ids "$ids" --numerics $num --backend cpu --out $d/$name-$num-cpu.npy > /dev/null 2>&1
      bad=0
      for r in $(seq 1 "${REPEAT:-6}"); do
        PLUMB_GPU_ORDER=cpu plumb logits --model "$model" --ids "$ids" --numerics $num --backend cuda \
          --out $d/$name-$num-gpu$r.npy > "$OUT/det-$name-$num-$r.log" 2>&1 || bad=$((bad+100))
        cmp -s $d/$name-$num-cpu.npy $d/$name-$num-gpu$r.npy || bad=$((bad+1))
      done
      summary+=("determinism $name $num: $bad of ${REPEAT:-6} cpu-order runs differ from the CPU (100 = a failed run)")
    done
  done
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
  # compute-sanitizer's four tools on one short forward per architecture, both reduction orders;
  # every run side by side (each a process on the CPUs, under SANITIZE_TIMEOUT), results in order.
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  g=tests/data/golden
  declare -A cs_pids=()
  runs=()
  for f in "v4 $g/v4/tiny-b $g/v4/tiny-b/prompt_17.ids.npy" "v3 $g/v3/tiny-a $g/v3/tiny-a/prompt_7.ids.npy"; do
    read -r name model ids <<< "$f"
    for order in ${SANITIZE_ORDERS:-cpu fast}; do
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
        run=$name-$order-$tool
        PLUMB_GPU_ORDER=$order timeout "${SANITIZE_TIMEOUT:-240}" $cs --tool $tool --error-exitcode 9 plumb logits \
          --model "$model" --ids "$ids" --numerics faithful --backend cuda --out "/tmp/cs-$run.npy" > "$OUT/cs-$run.log" 2>&1 &
        cs_pids[$run]=$!
        runs+=("$run")
      done
    done
  done
  for run in "${runs[@]}"; do
    wait "${cs_pids[$run]}"
    summary+=("sanitize ${run//-/ } rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/cs-$run.log")")
  done
fi
if [[ " $STEPS " == *" sanitize-ops "* ]]; then
  # compute-sanitizer's four tools on the GPU op harness (issue 19 item 4); poisoning stays on,
  # so initcheck sees only what the kernels themselves leave unwritten. racecheck serializes every
  # shared-memory access (one process did not finish GpuOps* in 140 s), so each tool runs the
  # filter in SANITIZE_OPS_SHARDS gtest shards side by side (the op tests leave the GPU mostly
  # idle); a shard's log is cs-ops-TOOL-SHARD.log, and the summary adds up every shard.
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  shards=${SANITIZE_OPS_SHARDS:-1}
  tools=${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}
  declare -A pids=()
  for tool in $tools; do  # every tool's shards at once
    for i in $(seq 0 $((shards - 1))); do
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${SANITIZE_OPS_TIMEOUT:-300}" $cs --tool $tool \
        --error-exitcode 9 plumb_tests --gtest_filter="${SANITIZE_OPS_FILTER:-GpuOps*}" > "$OUT/cs-ops-$tool-$i.log" 2>&1 &
      pids[$tool-$i]=$!
    done
  done
  for tool in $tools; do
    rcs=""
    for i in $(seq 0 $((shards - 1))); do wait "${pids[$tool-$i]}"; rcs="$rcs $?"; done
    logs=("$OUT"/cs-ops-$tool-*.log)
    summary+=("sanitize-ops $tool shards rc:$rcs; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "${logs[@]}" | sort | uniq -c | tr -s ' ' | tr '\n' ';') passed $(grep -hoE '^\[  PASSED  \] [0-9]+' "${logs[@]}" | awk '{s+=$4} END {print s+0}'), failed $(grep -hoE '^\[  FAILED  \] [0-9]+ test' "${logs[@]}" | awk '{s+=$4} END {print s+0}'), skipped $(grep -hoE '^\[  SKIPPED \] [0-9]+' "${logs[@]}" | awk '{s+=$4} END {print s+0}')")
  done
fi
if [[ " $STEPS " == *" bench "* ]]; then
  [ -n "$synth_pid" ] && { wait "$synth_pid" || summary+=("synth FAILED: $(tail -1 "$OUT/synth.log")"); }
  timeout "${BENCH_TIMEOUT:-540}" scripts/device/bench.sh > "$OUT/bench.log" 2>&1
  summary+=("bench rc=$? (see bench.log)")
  tail -30 "$OUT/bench.log"
fi
if [[ " $STEPS " == *" portable "* ]]; then
  # issue 17 item 5: the portable path (no FP8 tensor cores: bf16 matrix cores on dequantized
  # weights, what MI250 runs) on the same synthetic, beside bench's default path
  [ -n "$synth_pid" ] && wait "$synth_pid" 2>/dev/null
  PLUMB_GPU_PATH=portable timeout "${BENCH_TIMEOUT:-540}" plumb_bench --model "$CKPT" --backend cuda \
    --numerics "${BENCH_NUMERICS:-faithful}" --batch "${BENCH_BATCH:-1,32}" --context "${BENCH_CONTEXT:-512}" \
    --steps "${BENCH_STEPS:-10}" --prefill "${BENCH_PREFILL:-4096}" --json "$OUT/bench-portable.json" > "$OUT/bench-portable.log" 2>&1
  summary+=("portable rc=$? (see bench-portable.log)")
  tail -20 "$OUT/bench-portable.log"
fi
printf '%s\n' "${summary[@]}" | tee "$FINAL/summary.txt"
tar -C "$OUT" -czf "$FINAL/results.tar.gz" .
