#pragma once
// Block-wide reductions shared by the attention kernels (kernel-only header: .cu files only).
#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

// Max over the block; every thread gets the result. `red` holds one float per warp.
__device__ inline float block_max(float v, float* red) {
  v = warp_max(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float m = red[0];
  for (int i = 1; i < static_cast<int>(blockDim.x) / kWarp; ++i) m = fmaxf(m, red[i]);
  return m;
}

}  // namespace plumb::gpu::k
