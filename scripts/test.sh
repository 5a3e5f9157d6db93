#!/usr/bin/env bash
# README command (b): install dependencies, build, run the whole test suite, print the count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --hip
BUILD_DIR=${BUILD_DIR:-build}
# Disk: the main build keeps ~2.5 GB (debug info); each later stage builds its own folder of 1-2.5
# GB (HIP, two emulators, fuzz, ASan, TSan) and removes it once it has passed (KEEP_BUILDS=1 keeps
# them, for incremental reruns): the peak is the main build plus one stage, ~5 GB with ccache's
# growth. A failed stage keeps its folder for a look. CI's disk has once filled (2026-12-05:
# "No space left on device" in the HIP build), so say up front when it is short.
free_gb=$(( $(df -Pk . | awk 'NR==2 {print $4}') / 1048576 ))
[ "$free_gb" -ge 6 ] || echo "test.sh: warning: only $free_gb GB free here; the suite needs ~6 GB at its peak"
done_with() {  # a stage's build folder, once the stage has passed
  [ "${KEEP_BUILDS:-0}" = 1 ] || rm -rf "$1"
}
scripts/build.sh
start=$(date +%s)
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" 2>&1 | tee "$BUILD_DIR/ctest.log"
rc=${PIPESTATUS[0]}
set -e
echo "test.sh: $(grep -E 'tests passed|tests failed' "$BUILD_DIR/ctest.log" | tail -1) in $(( $(date +%s) - start )) s"
# The official openai npm client against the freshly built plumb serve on loopback
# (tests/server/node: openai pinned by its package-lock.json); skipped only without node/npm.
scripts/test-openai-client.sh "$BUILD_DIR" || exit 1
# The HIP (gfx90a) compile of the GPU backend: same kernel sources, Debian's hipcc, no GPU.
BUILD_DIR="$BUILD_DIR-hip" scripts/build-hip.sh > "$BUILD_DIR/hip.log" 2>&1 || { tail -40 "$BUILD_DIR/hip.log"; echo "test.sh: HIP build FAILED"; exit 1; }
echo "test.sh: $(tail -1 "$BUILD_DIR/hip.log")"
done_with "$BUILD_DIR-hip"
# The GPU op harness on the CUDA emulator (scripts/test-emu.sh; docs/CORRECTNESS.md, "The CUDA
# emulator"): the kernel sources run on the CPU, the GPU tests that take under a minute each there,
# in both flavours: CUDA (build-emu) and HIP gfx90a, wave64 and the MFMA tile (build-emu-hip);
# ~10 minutes each on 2 cores with its build. EMU=0 skips them.
if [ "${EMU:-1}" != 0 ]; then
  for flavor in cuda hip; do
    dir=$BUILD_DIR-emu$([ $flavor = hip ] && echo -hip || true)
    EMU_FLAVOR=$flavor BUILD_DIR=$dir scripts/test-emu.sh > "$BUILD_DIR/emu-$flavor.log" 2>&1 ||
      { tail -60 "$BUILD_DIR/emu-$flavor.log"; echo "test.sh: emulator ($flavor) FAILED"; exit 1; }
    grep '^test-emu: ' "$BUILD_DIR/emu-$flavor.log" | sed "s/^test-emu:/test.sh: emulator ($flavor):/"
    done_with "$dir"
  done
fi
# Bounded fuzz runs of every libFuzzer target (clang + libFuzzer, ASan, UBSan): 24 s each, 7 targets, ~3 minutes.
FUZZ_SECONDS=${FUZZ_SECONDS:-24}
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  BUILD_DIR="$BUILD_DIR-fuzz" scripts/fuzz.sh "$FUZZ_SECONDS" > "$BUILD_DIR/fuzz.log" 2>&1 || { tail -40 "$BUILD_DIR/fuzz.log"; echo "test.sh: fuzzing FAILED"; exit 1; }
  grep '^fuzz.sh: ' "$BUILD_DIR/fuzz.log" | sed 's/^fuzz.sh:/test.sh: fuzz/'
  done_with "$BUILD_DIR-fuzz"
fi
# The unit tests under ASan + UBSan and the concurrency tests (plumb_concurrency_tests) under
# TSan, CPU only (docs/CORRECTNESS.md, "Sanitizers": the TSan build compiles the libraries and
# 7 test files, ~7 minutes cold with its run on 2 cores). SANITIZE=asan or tsan runs one of them,
# SANITIZE=0 neither.
SANITIZE=${SANITIZE:-all}
if [ "$SANITIZE" != 0 ]; then
  for san in asan tsan; do
    [ "$SANITIZE" = all ] || [ "$SANITIZE" = $san ] || continue
    scripts/sanitize.sh $san > "$BUILD_DIR/$san.log" 2>&1 || { tail -60 "$BUILD_DIR/$san.log"; echo "test.sh: sanitizers ($san) FAILED"; exit 1; }
    grep '^sanitize.sh: ' "$BUILD_DIR/$san.log" | sed 's/^sanitize.sh:/test.sh:/'
    done_with build-$san
  done
fi
exit $rc
