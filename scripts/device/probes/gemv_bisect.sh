#!/usr/bin/env bash
# gemv_bisect.cu with plumb's linear_gemv.cu included (sm_90a), its table printed as Markdown: a
# probe for docs/PERF.md. `gemv_bisect.sh build` compiles it here into .device/gemv_bisect.xz (~6
# MB; carry it: nvcc takes ~1.5 minutes on this file, device time); on the GPU machine, from the
# repository root, the script runs that binary, or compiles it there when none was carried.
set -euo pipefail
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
build() {
  "$nvcc" -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG -I src -o "$1" scripts/device/probes/gemv_bisect.cu
}
if [ "${1:-}" = build ]; then
  build /tmp/gemv_bisect && mkdir -p .device && xz -T2 -c /tmp/gemv_bisect > .device/gemv_bisect.xz
  exit
fi
if [ -f .device/gemv_bisect.xz ]; then xz -dc .device/gemv_bisect.xz > /tmp/gemv_bisect; else build /tmp/gemv_bisect; fi
chmod +x /tmp/gemv_bisect
/tmp/gemv_bisect
