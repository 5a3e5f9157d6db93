#!/usr/bin/env bash
# Configures and builds plumb (binary build/plumb, tests build/tests/plumb_tests).
# BUILD_DIR overrides the build folder (helpers working side by side use their own).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# CUDA is preinstalled under /usr/local/cuda on these machines but not always on PATH; CMake then
# finds nvcc through CUDACXX and builds the CUDA backend (PLUMB_GPU=AUTO).
if ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
JOBS=${JOBS:-$(nproc)}
# Let ccache share objects between build folders (CI builds CUDA into build/ and HIP into
# build-hip/ from the same sources): with -g it would otherwise key on the working directory.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# ... and between checkouts side by side (git worktrees of helpers): paths below the checkout's
# parent are hashed relative to it.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
