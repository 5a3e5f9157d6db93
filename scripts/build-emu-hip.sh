#!/usr/bin/env bash
# Builds plumb with the CUDA emulator's HIP flavour as its GPU backend (cmake/emu.cmake,
# emu/emu_hip.h): the GPU backend compiled as for HIP gfx90a (PLUMB_HIP, 64-lane wavefronts, the
# MFMA tile) by g++ and run on the CPU, so the GPU op harness runs the HIP code paths without an
# AMD GPU:
#   scripts/build-emu-hip.sh && build-emu-hip/tests/plumb_tests --gtest_filter='GpuOps.*'
# (or EMU_FLAVOR=hip scripts/test-emu.sh). A development build for checking kernels
# (docs/CORRECTNESS.md, "The CUDA emulator"); never for speed. BUILD_DIR defaults to build-emu-hip.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-emu-hip} CMAKE_ARGS="-DPLUMB_GPU=EMU_HIP ${CMAKE_ARGS:-}" scripts/build.sh
