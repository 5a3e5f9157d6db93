#pragma once
// Launcher of the L2 warmer (GpuBackend::prefetch): Hopper's bulk prefetch of weight bytes into
// L2 from a few blocks, on a second stream, while the decode step's small kernels leave the memory
// idle. Kernel files include no plumb host headers: raw pointers and sizes.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

struct PrefetchRange {
  const uint8_t* data = nullptr;  // device bytes no kernel writes (a weight's data or scales)
  int64_t bytes = 0;
};
constexpr int kPrefetchMaxRanges = 8;
struct PrefetchRanges {
  PrefetchRange r[kPrefetchMaxRanges];
  int n = 0;
};

// Whether this build's kernels can warm L2 on a device of compute capability major.minor (CUDA
// sm_90 and later: cp.async.bulk.prefetch.L2; not on HIP, older NVIDIA devices or the emulator).
bool prefetch_l2_available(int major);
// Warms L2 with the ranges' bytes, in order, from `blocks` blocks of 32 threads. A hint: no value
// depends on it, and nothing waits for it.
gpuError_t prefetch_l2_ranges(const PrefetchRanges& r, int blocks, gpuStream_t s);

}  // namespace plumb::gpu::k
