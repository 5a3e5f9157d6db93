// paged_write's encoder for bf16 / fp8 / fp4 rows (backend/kv_row.h; f32 rows are copied by
// copy_rows_to): one block per row, the row's values and its encoded bytes in shared memory while
// it is encoded, a value a thread. An fp8 / fp4 scale block's amax is formed by the block's
// threads at once (atomicMax on the bits of the positive magnitudes: the CPU's serial
// `a > amax ? a : amax` from 0 skips NaN and zeros, and a maximum does not depend on the order),
// its scale byte by kv_row.h's rule, and each code by the same gpu_numerics.h encoder as the CPU's
// kv_encode_row: the same bytes. bf16 values and the fp8 rows' rope part are a value a thread as
// before.
// Why: a thread a scale block (kv_encode_unit) put a row's 7 fp8 or 4 fp4 blocks on lanes of one
// warp, each encoding its 64 or 32 values one after another: 8.8-12.7 us a decode step's row
// (ncu, PERF.md v37), instruction latency in one warp.
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kSmemBytes = 48 * 1024;  // dynamic shared memory usable without an opt-in

// Values of the row's scale blocks (fp8: its nope part; fp4: all; else none) and their count.
PLUMB_HD int64_t scaled_values(const backend::KvRowSpec& spec) {
  if (spec.format == backend::KvRowFormat::FP8) return spec.values - spec.rope;
  return spec.format == backend::KvRowFormat::FP4 ? spec.values : 0;
}
PLUMB_HD int64_t scale_blocks(const backend::KvRowSpec& spec) {
  const int64_t n = scaled_values(spec);
  return n > 0 ? (n + backend::kv_scale_rule(spec.format).block - 1) / backend::kv_scale_rule(spec.format).block : 0;
}

// The row's values (floats), its bytes (whole words), each scale block's amax (bits) and scale.
std::size_t encode_smem(const backend::KvRowSpec& spec) {
  return static_cast<std::size_t>(spec.values + backend::kv_row_words(spec) + 2 * scale_blocks(spec)) * sizeof(float);
}

__device__ __forceinline__ uint8_t pack_fp4(float lo, float hi, bool has_hi, float s) {
  return static_cast<uint8_t>(gpu::fp4_code(lo, s) | (has_hi ? gpu::fp4_code(hi, s) << 4 : 0));
}

__global__ void __launch_bounds__(kThreads) encode_rows_kernel(const RowEncode* jobs, const float* src,
                                                               backend::KvRowSpec spec) {
  pdl_begin();
  using backend::KvRowFormat;
  PLUMB_DYNAMIC_SHARED(float, xs);
  const int64_t n_words = backend::kv_row_words(spec), nb = scale_blocks(spec), ns = scaled_values(spec);
  uint32_t* words = reinterpret_cast<uint32_t*>(xs + spec.values);
  uint32_t* amax = words + n_words;
  float* scale = reinterpret_cast<float*>(amax + nb);
  uint8_t* row = reinterpret_cast<uint8_t*>(words);
  const RowEncode j = jobs[blockIdx.x];
  const float* x = src + j.src_row * spec.values;
  const int t = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x);
  for (int64_t i = t; i < spec.values; i += T) xs[i] = x[i];
  for (int64_t i = t; i < n_words; i += T) words[i] = 0;
  for (int64_t b = t; b < nb; b += T) amax[b] = 0;
  __syncthreads();
  if (spec.format == KvRowFormat::BF16) {
    for (int64_t i = t; i < spec.values; i += T) backend::kv_store_u16(row + 2 * i, backend::kv_bf16_bits(xs[i]));
  } else {
    const backend::KvScaleRule rule = backend::kv_scale_rule(spec.format);
    for (int64_t i = t; i < ns; i += T) {
      const float a = xs[i] < 0.f ? -xs[i] : xs[i];
      if (a > 0.f) atomicMax(&amax[i / rule.block], gpu::f32_bits(a));
    }
    __syncthreads();
    // Scale bytes: fp8 after the codes and the rope part, fp4 after the packed pairs.
    uint8_t* scale_bytes = row + (spec.format == KvRowFormat::FP8 ? ns + 2 * spec.rope : spec.values / 2);
    for (int64_t b = t; b < nb; b += T) {
      const uint8_t sb = gpu::ue8m0_scale_for(gpu::bits_f32(amax[b]), rule.qmax, rule.min_amax);
      scale_bytes[b] = sb;
      scale[b] = gpu::ue8m0_to_f32(sb);
    }
    __syncthreads();
    if (spec.format == KvRowFormat::FP8) {
      for (int64_t i = t; i < ns; i += T) row[i] = gpu::fp8_code(xs[i], scale[i / rule.block]);
      for (int64_t r = t; r < spec.rope; r += T) backend::kv_store_u16(row + ns + 2 * r, backend::kv_bf16_bits(xs[ns + r]));
    } else {  // a byte a thread: values 2i (low nibble) and 2i + 1, one scale block (blocks are even)
      for (int64_t i = t; 2 * i < ns; i += T)
        row[i] = pack_fp4(xs[2 * i], 2 * i + 1 < ns ? xs[2 * i + 1] : 0.f, 2 * i + 1 < ns, scale[2 * i / rule.block]);
    }
  }
  __syncthreads();
  for (int64_t i = t; i < n_words * 4; i += T) j.dst[i] = row[i];
}

}  // namespace

gpuError_t encode_rows(const RowEncode* jobs, int64_t n_jobs, const float* src, const backend::KvRowSpec& spec,
                       gpuStream_t s) {
  if (n_jobs <= 0 || spec.values <= 0) return gpuGetLastError();
  if (encode_smem(spec) > kSmemBytes) return gpuErrorNotSupported;
  return launch(encode_rows_kernel, static_cast<unsigned>(n_jobs), kThreads, encode_smem(spec), s, jobs, src, spec);
}

}  // namespace plumb::gpu::k
