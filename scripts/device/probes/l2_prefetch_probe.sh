#!/usr/bin/env bash
# Runs ON the GPU machine: compiles l2_prefetch_probe.cu with the machine's nvcc (sm_90a) and
# prints its table (Markdown). A probe for docs/PERF.md; needs no bundle.
set -euo pipefail
cd "$(dirname "$0")"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -O3 -std=c++17 -arch=sm_90a -o /tmp/l2_prefetch_probe l2_prefetch_probe.cu
/tmp/l2_prefetch_probe
