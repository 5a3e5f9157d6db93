#!/usr/bin/env bash
# Runs ON the GPU machine (device tool), from the repository root, with .device/bundle.tar.xz
# carried (made by scripts/device/bundle.sh). One call: unpack, GPU op harness, plumb verify on
# every committed fixture (reports under $OUT/verify-*), end-to-end greedy agreement, and
# optionally the benchmark. Prints a short summary last.
#   STEPS="ops verify hf golden-v3 bench" (default "ops verify"); GTEST_FILTER overrides the op
#   filter; MODES overrides the verify modes (reference faithful faithful-isolated
#   faithful-cpu-order: "-isolated" adds --isolate-layers, "-cpu-order" runs the GPU backend with
#   PLUMB_GPU_ORDER=cpu). golden-v3 runs tools/golden/make_v3_faithful.py on DeepSeek-V3's
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
    # reference and faithful free-running, faithful also layer-isolated and with the GPU summing
    # in the CPU's order (bitwise); V3 also reference in the CPU's order (its MLA)
    modes="reference faithful faithful-isolated faithful-cpu-order"
    [[ $name == v3-* ]] && modes="$modes reference-cpu-order"
    for mode in ${MODES:-$modes}; do
      num=${mode%%-*}; extra=""; order=fast
      [[ $mode == *-isolated ]] && extra="--isolate-layers"
      [[ $mode == *-cpu-order ]] && order=cpu
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
if [[ " $STEPS " == *" bench "* ]]; then
  timeout "${BENCH_TIMEOUT:-540}" scripts/device/bench.sh > "$OUT/bench.log" 2>&1
  summary+=("bench rc=$? (see bench.log)")
  tail -30 "$OUT/bench.log"
fi
printf '%s\n' "${summary[@]}" | tee "$FINAL/summary.txt"
tar -C "$OUT" -czf "$FINAL/results.tar.gz" .
