// Attention kernels beside sparse attention (sparse_attention.cu): the window ring update and
// absorbed MLA (MODEL-SPEC 7). A straightforward first MLA: one block per (query row, head), a
// two-pass softmax whose scores live in shared memory (or a global scratch when a row has more
// candidates than fit).
//
// Rounding: P.V products and sums use __fmul_rn/__fadd_rn (no FMA contraction), the softmax
// denominator is summed sequentially in candidate order, as on the CPU.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/block_reduce.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWarps = kThreads / 32;  // kWarp is 32 or 64
constexpr std::size_t kSmemBytes = 48 * 1024;  // shared memory usable without an opt-in


// ---- window update

__global__ void copy_rows_kernel(const RowCopy* jobs, const float* src, int64_t row_size) {
  pdl_begin();
  const RowCopy j = jobs[blockIdx.x];
  const float* s = src + j.src_row * row_size;
  for (int64_t i = threadIdx.x; i < row_size; i += blockDim.x) j.dst[i] = s[i];
}

// ---- MLA

__global__ void __launch_bounds__(kThreads) mla_kernel(MlaArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, smem);  // q_lat [R], q_pe [P], then the scores unless a.scratch is set
  __shared__ float red[kMaxWarps];
  const int64_t bh = a.row0 * a.H + blockIdx.x, row = bh / a.H, h = bh % a.H;
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    for (int64_t d = threadIdx.x; d < a.R; d += blockDim.x) a.out[bh * a.R + d] = 0.f;
    return;
  }
  const MlaSeq sq = a.seqs[a.row_seq[row]];
  const int64_t t = sq.start + (row - sq.row), nc = t + 1, R = a.R, P = a.P;
  float* ql = smem;
  float* qp = smem + R;
  float* sc = a.scratch ? a.scratch + static_cast<int64_t>(blockIdx.x) * a.max_cand : smem + R + P;
  for (int64_t d = threadIdx.x; d < R; d += blockDim.x) ql[d] = a.q_lat[(row * a.H + h) * R + d];
  for (int64_t d = threadIdx.x; d < P; d += blockDim.x) qp[d] = a.q_pe[(row * a.H + h) * P + d];
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nwarps = blockDim.x / kWarp;
  for (int64_t j = warp; j < nc; j += nwarps) {
    const uint8_t* cj = paged_entry(a.latent, sq.blocks, j);
    const uint8_t* kj = paged_entry(a.k_pe, sq.blocks, j);
    // The latent and the rope parts: separate sums under bf16 (two einsums), one running sum else.
    float sl = 0.f, sp = 0.f;
    if (a.cpu_order) {  // one lane, in index order (a branch uniform over the warp)
      if (lane == 0) {
        for (int64_t d = 0; d < R; ++d) sl = __fadd_rn(sl, __fmul_rn(ql[d], paged_value(a.latent, cj, d)));
        float& s2 = a.bf16 ? sp : sl;
        for (int64_t d = 0; d < P; ++d) s2 = __fadd_rn(s2, __fmul_rn(qp[d], paged_value(a.k_pe, kj, d)));
      }
    } else {
      for (int64_t d = lane; d < R; d += kWarp) sl += ql[d] * paged_value(a.latent, cj, d);
      for (int64_t d = lane; d < P; d += kWarp) sp += qp[d] * paged_value(a.k_pe, kj, d);
      sl = warp_sum(sl);
      sp = warp_sum(sp);
      if (!a.bf16) sl = __fadd_rn(sl, sp);
    }
    if (lane == 0)
      sc[j] = a.bf16 ? round_bf16(__fmul_rn(round_bf16(__fadd_rn(round_bf16(sl), round_bf16(sp))), a.scale))
                     : __fmul_rn(sl, a.scale);
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) mx = fmaxf(mx, sc[j]);
  mx = block_max(mx, red);
  for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) sc[j] = exp_cr(sc[j] - mx);
  __syncthreads();
  float sum = 0.f;
  for (int64_t j = 0; j < nc; ++j) sum = __fadd_rn(sum, sc[j]);
  __syncthreads();  // every thread has its sum before the values become probabilities
  for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) {
    const float p = __fdiv_rn(sc[j], sum);
    sc[j] = a.bf16 ? round_bf16(p) : p;  // softmax(f32).type_as(x) under bf16
  }
  __syncthreads();

  float* o = a.out + (row * a.H + h) * R;
  for (int64_t d = threadIdx.x; d < R; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < nc; ++j)
      acc = __fadd_rn(acc, __fmul_rn(sc[j], paged_value(a.latent, paged_entry(a.latent, sq.blocks, j), d)));
    o[d] = a.bf16 ? round_bf16(acc) : acc;
  }
}

}  // namespace

gpuError_t copy_rows_to(const RowCopy* jobs, int64_t n_jobs, const float* src, int64_t row_size, gpuStream_t s) {
  if (n_jobs <= 0 || row_size <= 0) return gpuGetLastError();
  return launch(copy_rows_kernel, static_cast<unsigned>(n_jobs), kThreads, 0, s, jobs, src, row_size);
}

int64_t mla_attention_smem_cands(int64_t R, int64_t P) {
  return static_cast<int64_t>(kSmemBytes / sizeof(float)) - R - P;
}

gpuError_t mla_attention(const MlaArgs& a, gpuStream_t s) {
  if (a.rows * a.H <= 0) return gpuGetLastError();
  const std::size_t smem = static_cast<std::size_t>(a.R + a.P + (a.scratch ? 0 : a.max_cand)) * sizeof(float);
  return launch(mla_kernel, static_cast<unsigned>(a.rows * a.H), kThreads, smem, s, a);
}

}  // namespace plumb::gpu::k
