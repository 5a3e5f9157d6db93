// linear()'s split K (paths (d) and (f)): the launches that split a GEMM's K into ranges write
// each range's unrounded partial sum; this adds them in split order and rounds as asked.
#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/linear.h"

namespace plumb::gpu::k {
namespace {

// y[n][c] = part[0][n][c] + part[1][n][c] + ... in split order (then rounded as asked).
__global__ void split_sum_kernel(LinearArgs a, int splits, const float* part) {
  pdl_begin();
  const int64_t cols = a.groups * a.R, i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.nrows * cols) return;
  const int64_t n = i / cols, c = i % cols;
  float v = part[split_part_index(a, 0, n, c)];
  for (int s = 1; s < splits; ++s) v += part[split_part_index(a, s, n, c)];
  a.y[n * a.ldy + c] = a.round_bf16 ? round_bf16(v) : v;
}

}  // namespace

gpuError_t linear_split_sum(const LinearArgs& a, int splits, const float* part, gpuStream_t s) {
  const int64_t outs = a.nrows * a.groups * a.R;
  if (outs <= 0) return gpuGetLastError();
  return launch(split_sum_kernel, static_cast<unsigned>((outs + 255) / 256), 256, 0, s, a, splits, part);
}

}  // namespace plumb::gpu::k
