#!/usr/bin/env bash
# Builds plumb with the CUDA backend HERE (the GPU machine has no Debian dev packages) and packs
# what a GPU run needs into .device/bundle.tar.xz: stripped plumb, plumb_tests, plumb_bench,
# plumb_engine_bench and plumb_kv_quality,
# and the three shared libraries the GPU machine lacks (fmt, pcre2, simdjson). The device tool
# carries the working tree (~53 MiB), this bundle and the llama.cpp kit (.peer, ~5 MiB) within its
# 64 MiB limit, hence xz.
# Usage: scripts/device/bundle.sh   then run scripts/device/check.sh on the GPU machine with
# `carry: [".device/bundle.tar.xz"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-device}
# Its own build folder compiles for the H200 only (sm_90a; the portable path is a run-time switch,
# PLUMB_GPU_PATH=portable): the bundle then carries one device code per kernel instead of three,
# which keeps tree + bundle under the device tool's 64 MiB. BUILD_DIR=build reuses the test build
# (sm_80 + sm_90a + PTX: 7.7 MB of bundle at 98dd16d against 5.2 MB for sm_90a only; with the
# 58.5 MB tree that is 63 MiB against 60).
# Its layers are shared libraries (PLUMB_SHARED_LAYERS): the five binaries share one copy of the
# kernels (8.0 MB of bundle with static layers at b20fb1a, over what a call may carry).
arch_args=""
[ "$BUILD_DIR" = build-device ] && arch_args="-DPLUMB_CUDA_ARCHS=${BUNDLE_CUDA_ARCHS:-90a-real} -DPLUMB_SHARED_LAYERS=ON"
BUILD_DIR=$BUILD_DIR BUILD_TYPE=${BUILD_TYPE:-Release} CMAKE_ARGS="-DPLUMB_GPU=CUDA $arch_args ${CMAKE_ARGS:-}" scripts/build.sh
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" .device
# BUNDLE_BINS: which of them (default all five).
for b in ${BUNDLE_BINS:-plumb tests/plumb_tests bench/plumb_bench bench/plumb_engine_bench bench/plumb_kv_quality}; do
  [ -f "$BUILD_DIR/$b" ] && strip -o "$stage/bin/$(basename "$b")" "$BUILD_DIR/$b"
done
for lib in "$BUILD_DIR"/libplumb_*.so; do [ -f "$lib" ] && strip --strip-unneeded -o "$stage/lib/$(basename "$lib")" "$lib"; done
for lib in libfmt.so.9 libpcre2-8.so.0 libsimdjson.so.14; do cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/lib/"; done
echo "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty') built $(date -u +%FT%TZ) on $(hostname)" > "$stage/BUILD"
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
# (written beside it and renamed: a device call that starts meanwhile carries the old one whole)
XZ_OPT=${XZ_OPT:--9e} tar -C "$stage" -cJf .device/bundle.tar.xz.part .  # -9e: the three binaries share fatbins (9.0 -> 4.9 MB)
mv .device/bundle.tar.xz.part .device/bundle.tar.xz
rm -rf "$stage"
ls -la .device/bundle.tar.xz
total=$(( tree + $(stat -c %s .device/bundle.tar.xz) ))
echo "bundle: tracked tree + bundle = $(( total / 1048576 )) MiB of the device tool's 64 MiB"
[ "$total" -lt $(( 62 * 1048576 )) ] || echo "bundle: WARNING: less than 2 MiB of headroom; slim the tree or the bundle"
