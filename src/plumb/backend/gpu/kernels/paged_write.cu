// paged_write's encoder for bf16 / fp8 / fp4 rows (backend/kv_row.h; f32 rows are copied by
// copy_rows_to): one block per row; the row is zeroed, then each thread encodes whole units (an
// fp8 block of 64, a rope value, an fp4 block of 32, a bf16 value), which own disjoint bytes.
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 128;

__global__ void encode_rows_kernel(const RowEncode* jobs, const float* src, backend::KvRowSpec spec) {
  pdl_begin();
  const RowEncode j = jobs[blockIdx.x];
  const float* x = src + j.src_row * spec.values;
  const int64_t bytes = backend::kv_row_words(spec) * 4;
  for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) j.dst[i] = 0;
  __syncthreads();  // fp4 units or their nibbles into zeroed bytes
  const int64_t units = backend::kv_row_units(spec);
  for (int64_t b = threadIdx.x; b < units; b += blockDim.x) backend::kv_encode_unit(spec, x, j.dst, b);
}

}  // namespace

gpuError_t encode_rows(const RowEncode* jobs, int64_t n_jobs, const float* src, const backend::KvRowSpec& spec,
                       gpuStream_t s) {
  if (n_jobs <= 0 || spec.values <= 0) return gpuGetLastError();
  return launch(encode_rows_kernel, static_cast<unsigned>(n_jobs), kThreads, 0, s, jobs, src, spec);
}

}  // namespace plumb::gpu::k
