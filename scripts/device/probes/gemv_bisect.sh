#!/usr/bin/env bash
# gemv_bisect.cu (its table printed as Markdown): a probe for docs/PERF.md, linked against the
# device bundle's libplumb_backend.so. `gemv_bisect.sh build` compiles it here (after
# scripts/device/bundle.sh: build-device/) into .device/gemv_bisect (~1 MB; carry it with the
# bundle); on the GPU machine, from the repository root, `gemv_bisect.sh` runs it against the
# unpacked bundle (/tmp/plumb-device, which quick_round.sh or long_checks.sh unpack).
set -euo pipefail
if [ "${1:-}" = build ]; then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  mkdir -p .device
  "$nvcc" -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG -I src -o .device/gemv_bisect \
    scripts/device/probes/gemv_bisect.cu -Lbuild-device -lplumb_backend -Xlinker --allow-shlib-undefined
  exit
fi
LD_LIBRARY_PATH=/tmp/plumb-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} .device/gemv_bisect
