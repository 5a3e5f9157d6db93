// paged_write's encoder for bf16 / fp8 / fp4 rows (backend/kv_row.h; f32 rows are copied by
// copy_rows_to): one block per row. The row's values and its encoded bytes live in shared memory
// while it is encoded: each thread encodes whole units (an fp8 block of 64, a rope value, an fp4
// block of 32, a bf16 value), which own disjoint bytes, then the block copies the bytes out.
// Why shared memory: a unit's encoder is a serial loop (its block's amax, then one code at a
// time, an fp4 nibble or-ed into its byte), and on global memory each step waited for a round
// trip: 9.5-12.7 us to encode one row of a decode step (ncu, PERF.md v37).
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 128;
constexpr std::size_t kSmemBytes = 48 * 1024;  // dynamic shared memory usable without an opt-in

// The row's values (floats), then its bytes (whole words).
std::size_t encode_smem(const backend::KvRowSpec& spec) {
  return static_cast<std::size_t>(spec.values + backend::kv_row_words(spec)) * sizeof(float);
}

__global__ void encode_rows_kernel(const RowEncode* jobs, const float* src, backend::KvRowSpec spec) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, xs);
  uint32_t* words = reinterpret_cast<uint32_t*>(xs + spec.values);
  const RowEncode j = jobs[blockIdx.x];
  const float* x = src + j.src_row * spec.values;
  const int64_t n_words = backend::kv_row_words(spec);
  for (int64_t i = threadIdx.x; i < spec.values; i += blockDim.x) xs[i] = x[i];
  for (int64_t i = threadIdx.x; i < n_words; i += blockDim.x) words[i] = 0;
  __syncthreads();  // the values staged; fp4 units or their nibbles into zeroed bytes
  uint8_t* row = reinterpret_cast<uint8_t*>(words);
  const int64_t units = backend::kv_row_units(spec);
  for (int64_t b = threadIdx.x; b < units; b += blockDim.x) backend::kv_encode_unit(spec, xs, row, b);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n_words * 4; i += blockDim.x) j.dst[i] = row[i];
}

}  // namespace

gpuError_t encode_rows(const RowEncode* jobs, int64_t n_jobs, const float* src, const backend::KvRowSpec& spec,
                       gpuStream_t s) {
  if (n_jobs <= 0 || spec.values <= 0) return gpuGetLastError();
  if (encode_smem(spec) > kSmemBytes) return gpuErrorNotSupported;
  return launch(encode_rows_kernel, static_cast<unsigned>(n_jobs), kThreads, encode_smem(spec), s, jobs, src, spec);
}

}  // namespace plumb::gpu::k
