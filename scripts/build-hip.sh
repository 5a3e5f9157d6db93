#!/usr/bin/env bash
# Compiles the GPU backend for AMD gfx90a (MI250) with Debian's hipcc from the same kernel sources
# as CUDA and links the plumb binary against the HIP runtime. No AMD GPU is needed (or used):
# this proves the HIP build, it does not run it. BUILD_DIR defaults to build-hip.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hipcc >/dev/null || { echo "build-hip: hipcc not found (scripts/install-deps.sh --hip installs it)"; exit 1; }
BUILD_DIR=${BUILD_DIR:-build-hip} \
  CMAKE_ARGS="-DPLUMB_GPU=HIP -DPLUMB_BUILD_TESTS=OFF -DPLUMB_BUILD_BENCH=OFF ${CMAKE_ARGS:-}" scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build-hip}
# The binary must carry gfx90a code objects and link libamdhip64.
ldd "$BUILD_DIR/plumb" | grep -q libamdhip64 || { echo "build-hip: plumb is not linked to libamdhip64"; exit 1; }
n=$(ls "$BUILD_DIR"/hip-kernels/*.o 2>/dev/null | wc -l)
echo "build-hip: $n kernel files compiled for gfx90a; $BUILD_DIR/plumb links libamdhip64"
