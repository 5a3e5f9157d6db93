#!/usr/bin/env bash
# Compiles one GPU kernel file alone, for CUDA sm_90a (with ptxas's register and spill report)
# and for HIP gfx90a, into a temporary folder: a quick check of a kernel change on a machine
# without a GPU, without touching any build directory (so several can run at once).
# Usage: scripts/compile-kernel.sh src/plumb/backend/gpu/kernels/linear_gemv.cu [--no-hip]
set -euo pipefail
cd "$(dirname "$0")/.."
f=${1:?usage: scripts/compile-kernel.sh KERNEL.cu [--no-hip]}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -I src -O2 -DNDEBUG --generate-code=arch=compute_90a,code=[sm_90a] --expt-relaxed-constexpr \
  -Xcompiler=-Wall -Xptxas=-v -std=c++20 -x cu -c "$f" -o "$out/cuda.o" 2>&1 |
  grep -E 'error|warning|Compiling entry|Used [0-9]+ registers|spill' | c++filt | sed -E 's/\(plumb::gpu::[^)]*\)//; s/plumb::gpu::k::\(anonymous namespace\):://' || true
[ -f "$out/cuda.o" ] || { echo "compile-kernel: nvcc failed on $f"; exit 1; }
if [ "${2:-}" != "--no-hip" ]; then
  hipcc --offload-arch=gfx90a -std=c++20 -O3 -fPIC -Wall -ffp-contract=off -I src -x hip -c "$f" -o "$out/hip.o" ||
    { echo "compile-kernel: hipcc failed on $f"; exit 1; }
fi
echo "compile-kernel: $f compiles (sm_90a$([ "${2:-}" = "--no-hip" ] || echo ', gfx90a'))"
