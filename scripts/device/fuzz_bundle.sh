#!/usr/bin/env bash
# Builds the libFuzzer targets HERE (scripts/fuzz.sh --build: clang, ASan + UBSan, libFuzzer
# linked statically) and packs what scripts/device/fuzz_long.sh needs into .device/fuzz.tar.xz:
# the stripped fuzzers, the shared libraries the GPU machine lacks (fmt, pcre2, simdjson), the
# runner scripts, the dictionaries and the committed seed corpora. The tokenizer the tokenizer
# targets load (models/tiny-kjv) travels with the working tree. A few MB: it and the tree stay
# well inside the device tool's 64 MiB carry limit.
# Usage: scripts/device/fuzz_bundle.sh   then, on the GPU machine (device tool `run`, timeout_s 560):
#   carry [".device/fuzz.tar.xz"], command "scripts/device/fuzz_long.sh"
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-fuzz}
BUILD_DIR=$BUILD_DIR scripts/fuzz.sh --build "$@"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(sed -n 's/^ALL_TARGETS=(\(.*\))$/\1/p' scripts/fuzz.sh | tr ' ' '\n')
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$stage/dict" "$stage/corpus" .device
for t in "${targets[@]}"; do
  strip -o "$stage/bin/$t" "$BUILD_DIR/tests/fuzz/$t"
  cp "tests/fuzz/$t.dict" "$stage/dict/"
  cp -r "tests/fuzz/corpus/$t" "$stage/corpus/"
done
for lib in libfmt.so.9 libpcre2-8.so.0 libsimdjson.so.14; do cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/lib/"; done
cp scripts/fuzz-long-target.sh "$stage/bin/"
# The fuzzers load the tokenizer from the source path compiled in: fuzz_long.sh links it there.
echo "$(pwd)" > "$stage/SOURCE_DIR"
echo "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty') built $(date -u +%FT%TZ) on $(hostname)" > "$stage/BUILD"
XZ_OPT=${XZ_OPT:--9} tar -C "$stage" -cJf .device/fuzz.tar.xz .
rm -rf "$stage"
ls -la .device/fuzz.tar.xz
