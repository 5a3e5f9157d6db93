#!/usr/bin/env bash
# Builds plumb with the CUDA emulator as its GPU backend (cmake/emu.cmake): the GPU backend's own
# kernel sources compiled by g++ and run on the CPU, so the GPU op harness runs without a GPU:
#   scripts/build-emu.sh && build-emu/tests/plumb_tests --gtest_filter='GpuOps.*'
# A development build for checking kernels (docs/CORRECTNESS.md, "The CUDA emulator"); never for
# speed. BUILD_DIR defaults to build-emu.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-emu} CMAKE_ARGS="-DPLUMB_GPU=EMU ${CMAKE_ARGS:-}" scripts/build.sh
