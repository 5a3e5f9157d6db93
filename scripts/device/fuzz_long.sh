#!/usr/bin/env bash
# Runs ON the GPU machine (device tool `run`, CPUs only), from the repository root, with
# .device/fuzz.tar.xz carried (scripts/device/fuzz_bundle.sh): every packed libFuzzer target to
# FUZZ_EXECS executions (default 10,000,000) with FUZZ_JOBS processes (default nproc, 16 there),
# one target after the other, inside FUZZ_BUDGET_S seconds in all (default 450: one device call
# of at most 8 minutes with the unpacking). Each target may use the budget left divided by the
# targets left, so a fast target leaves its time to the slower ones (they run last).
# Writes to $OUT: fuzz_long.tsv (target, execs, seconds, execs/s, crashes, cov, ft, corpus),
# summary.txt, and artifacts.tar.gz (the inputs that crashed, if any) + logs.tar.gz; the final
# corpora go to corpus.tar.gz (merge them into tests/fuzz/corpus with scripts/fuzz.sh --long
# --merge, or keep only the coverage numbers). Exit 1 when a target crashed or missed its
# executions. FUZZ_TARGETS="config_fuzz npy_fuzz" runs only those (10M executions of every
# target do not fit one call: docs/CORRECTNESS.md, "Long fuzzing runs"). Try it here first with tiny numbers: FUZZ_EXECS=2000 FUZZ_JOBS=2 OUT=/tmp/o scripts/device/fuzz_long.sh
set -uo pipefail
EXECS=${FUZZ_EXECS:-10000000}
JOBS=${FUZZ_JOBS:-$(nproc)}
BUDGET_S=${FUZZ_BUDGET_S:-450}
FINAL=${OUT:-/tmp/plumb-fuzz-out}
mkdir -p "$FINAL"
root=$(pwd)
dev=/tmp/plumb-fuzz
rm -rf "$dev" && mkdir -p "$dev" && tar -C "$dev" -xJf .device/fuzz.tar.xz || { echo "fuzz_long.sh: no .device/fuzz.tar.xz"; exit 1; }
cat "$dev/BUILD"
src=$(cat "$dev/SOURCE_DIR")
if [ "$src" != "$root" ] && [ ! -e "$src/models/tiny-kjv" ]; then mkdir -p "$(dirname "$src")"; ln -sfn "$root" "$src"; fi
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}"
# Fast targets first (executions per second measured on the build machine), so the slow ones
# inherit what the fast ones leave of the budget.
order=(config_fuzz npy_fuzz safetensors_header_fuzz chat_output_fuzz tokenizer_encode_fuzz chat_request_fuzz tokenizer_json_fuzz)
targets=()
for t in "${order[@]}"; do [ -x "$dev/bin/$t" ] && targets+=("$t"); done
for b in "$dev"/bin/*_fuzz; do t=$(basename "$b"); [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t"); done
# FUZZ_TARGETS="a b": only those (in that order), to split the targets over several calls.
if [ -n "${FUZZ_TARGETS:-}" ]; then read -ra targets <<< "$FUZZ_TARGETS"; fi
printf 'target\texecs\tseconds\texecs_per_s\tcrashes\tcov\tft\tcorpus\n' > "$FINAL/fuzz_long.tsv"
start=$(date +%s) rc=0 left=${#targets[@]}
for t in "${targets[@]}"; do
  remaining=$(( BUDGET_S - ($(date +%s) - start) ))
  cap=$(( remaining / left ))
  [ "$cap" -ge 1 ] || cap=1
  line=$("$dev/bin/fuzz-long-target.sh" "$dev/bin/$t" "$dev/dict/$t.dict" "$dev/corpus/$t" "$dev/work/$t" \
           --execs "$EXECS" --jobs "$JOBS" --max-seconds "$cap" 2>&1 | tail -25)
  status=${PIPESTATUS[0]}
  echo "$line"
  stats=$(echo "$line" | grep '^fuzz-long: ' | head -1)
  val() { echo "$stats" | grep -oE "$1=[0-9.]+" | cut -d= -f2; }
  execs=$(val execs) secs=$(val seconds)
  rate=$(awk -v e="${execs:-0}" -v s="${secs:-0}" 'BEGIN {printf "%d", (s > 0) ? e / s : 0}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${execs:-0}" "${secs:-0}" "$rate" "$(val crashes)" "$(val cov)" "$(val ft)" \
    "$(val corpus)" >> "$FINAL/fuzz_long.tsv"
  if [ "$status" -ne 0 ]; then rc=1; fi
  if [ "${execs:-0}" -lt "$EXECS" ]; then echo "fuzz_long.sh: $t ran ${execs:-0} of $EXECS executions in its ${cap} s"; rc=1; fi
  left=$(( left - 1 ))
done
tar -C "$dev/work" -czf "$FINAL/logs.tar.gz" $(cd "$dev/work" && ls -d */logs)
found=$(cd "$dev/work" && find . -path '*/artifacts/*' -type f)
[ -n "$found" ] && tar -C "$dev/work" -czf "$FINAL/artifacts.tar.gz" $found
tar -C "$dev/work" -czf "$FINAL/corpus.tar.gz" $(cd "$dev/work" && ls -d */corpus)
{
  cat "$dev/BUILD"
  echo "fuzz_long.sh: FUZZ_EXECS=$EXECS FUZZ_JOBS=$JOBS on $(nproc) cores, $(( $(date +%s) - start )) s, exit $rc"
  column -t -s $'\t' "$FINAL/fuzz_long.tsv"
} | tee "$FINAL/summary.txt"
exit $rc
