#!/usr/bin/env bash
# Builds plumb with the CUDA backend HERE (the GPU machine has no Debian dev packages) and packs
# what a GPU run needs into .device/bundle.tar.xz: stripped plumb, plumb_tests, plumb_bench,
# plumb_engine_bench and plumb_kv_quality,
# and the three shared libraries the GPU machine lacks (fmt, pcre2, simdjson). The device tool
# carries the working tree (~53 MiB) plus this bundle within its 64 MiB limit, hence xz.
# Usage: scripts/device/bundle.sh   then run scripts/device/check.sh on the GPU machine with
# `carry: [".device/bundle.tar.xz"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-device}
BUILD_DIR=$BUILD_DIR BUILD_TYPE=${BUILD_TYPE:-Release} CMAKE_ARGS="-DPLUMB_GPU=CUDA ${CMAKE_ARGS:-}" scripts/build.sh
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" .device
for b in plumb tests/plumb_tests bench/plumb_bench bench/plumb_engine_bench bench/plumb_kv_quality; do
  [ -f "$BUILD_DIR/$b" ] && strip -o "$stage/bin/$(basename "$b")" "$BUILD_DIR/$b"
done
for lib in libfmt.so.9 libpcre2-8.so.0 libsimdjson.so.14; do cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/lib/"; done
echo "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty') built $(date -u +%FT%TZ) on $(hostname)" > "$stage/BUILD"
XZ_OPT=${XZ_OPT:--9e} tar -C "$stage" -cJf .device/bundle.tar.xz .  # -9e: the three binaries share fatbins (9.0 -> 4.9 MB)
rm -rf "$stage"
ls -la .device/bundle.tar.xz
