// Attention kernels: sparse attention with sink (MODEL-SPEC 3.6), the window ring update and
// absorbed MLA (MODEL-SPEC 7). Straightforward first versions: one block per (query row, head),
// a two-pass softmax whose scores live in shared memory (or a global scratch when a row has more
// candidates than fit). Two passes; with prob_block the release kernel's online softmax is
// replayed from the stored scores block by block (running block maxima first), in the CPU
// reference's order.
//
// Rounding: P.V products and sums use __fmul_rn/__fadd_rn (no FMA contraction), the softmax
// denominator is summed sequentially in candidate order and the sparse attention's q.k dot
// products in cpu::dot's order (cpu_order.h), as on the CPU.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWarps = kThreads / 32;  // kWarp is 32 or 64
constexpr std::size_t kSmemBytes = 48 * 1024;  // shared memory usable without an opt-in
constexpr int kMaxProbBlocks = 512;  // running block maxima of the blocked softmax (static smem)

// Max over the block; every thread gets the result. `red` holds one float per warp.
__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float m = red[0];
  for (int i = 1; i < static_cast<int>(blockDim.x) / kWarp; ++i) m = fmaxf(m, red[i]);
  return m;
}

// ---- sparse attention

struct RowCtx {
  AttnSeq sq;
  int64_t row, t, lo, nwin, visible, nc;
  int64_t wslots;  // the release's window part of the index row: min(len, W) in a prefill, else W
};

__device__ RowCtx row_ctx(const SparseAttnArgs& a, int64_t row) {
  RowCtx c;
  c.sq = a.seqs[a.row_seq[row]];
  c.row = row;
  c.t = c.sq.start + (row - c.sq.row);
  c.lo = c.t - a.W + 1 > 0 ? c.t - a.W + 1 : 0;
  c.nwin = c.t - c.lo + 1;
  c.visible = a.ratio > 0 ? (c.t + 1) / a.ratio : 0;
  c.nc = c.nwin + (a.ratio > 0 ? (a.selected ? a.K : c.visible) : 0);
  c.wslots = c.sq.start == 0 ? (c.sq.len < a.W ? c.sq.len : a.W) : a.W;
  return c;
}

// A candidate's key/value row: an f32 row (window positions, f32 pools) or an encoded pool row.
struct Cand {
  const float* f = nullptr;
  const uint8_t* enc = nullptr;
  __device__ explicit operator bool() const { return f || enc; }
};

__device__ __forceinline__ float cand_value(const SparseAttnArgs& a, const Cand& c, int64_t d) {
  return c.f ? c.f[d] : backend::kv_value(a.comp.spec, c.enc, d);
}

__device__ Cand compressed_cand(const SparseAttnArgs& a, const RowCtx& c, int64_t e) {
  Cand r;
  if (a.recent_positions > 0 && e >= backend::kv_recent_first(c.t, a.recent_positions, a.ratio)) {
    const int64_t first_new = c.sq.start / a.ratio;  // the host checked the ring holds the rest
    r.f = e >= first_new ? c.sq.fresh + (e - first_new) * a.Dh : c.sq.recent + (e % c.sq.recent_rows) * a.Dh;
    return r;
  }
  const uint8_t* row = paged_entry(a.comp, c.sq.blocks, e);
  if (a.comp.spec.format == backend::KvRowFormat::F32) {
    r.f = reinterpret_cast<const float*>(row);
  } else {
    r.enc = row;
  }
  return r;
}

// Candidate j of a query row (window positions first, then compressed entries, as on the CPU):
// its key/value row, or none for a skipped selection slot (-1) or an invisible entry (reported
// through *bad).
__device__ Cand candidate(const SparseAttnArgs& a, const RowCtx& c, int64_t j, int64_t* bad) {
  if (j < c.nwin) {
    const int64_t pos = c.lo + j;
    Cand r;
    r.f = pos >= c.sq.start ? a.kv + (c.sq.row + pos - c.sq.start) * a.Dh : c.sq.ring + (pos % a.W) * a.Dh;
    return r;
  }
  j -= c.nwin;
  if (!a.selected) return compressed_cand(a, c, j);
  const int64_t e = a.selected[c.row * a.K + j];
  if (e < 0) return {};
  if (e >= c.visible) {
    if (bad) *bad = e;
    return {};
  }
  return compressed_cand(a, c, e);
}

// ---- the release kernel's blocked online softmax (SparseAttnArgs::prob_block, cpu_attention.cpp)
// Candidate j sits at slot j (window) or wslots + (j - nwin) (compressed) of the index row; block
// b holds slots [b*B, (b+1)*B), i.e. candidates [first_cand(b), first_cand(b + 1)).
__device__ int64_t first_cand(const SparseAttnArgs& a, const RowCtx& c, int64_t b) {
  const int64_t s0 = b * a.prob_block;
  const int64_t j = s0 < c.nwin ? s0 : (s0 < c.wslots ? c.nwin : c.nwin + (s0 - c.wslots));
  return j < c.nc ? j : c.nc;
}

// sc holds the scores (-inf for a skipped slot). Every block's running max goes to bmax, the
// scores become e_j = exp(s_j - m_b) (then bf16 with bf16_probs), and each thread gets
// l = sum over blocks of (l * alpha_b + sum e_j) + exp(sink - m), in the CPU's order. A block
// without a candidate keeps m (alpha = 1) and adds 0, as the CPU's skipping it does.
__device__ float blocked_softmax(const SparseAttnArgs& a, const RowCtx& c, float sink, float* sc, float* bmax,
                                 int64_t nb) {
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
    float mx = -INFINITY;
    for (int64_t j = first_cand(a, c, b); j < first_cand(a, c, b + 1); ++j) mx = fmaxf(mx, sc[j]);
    bmax[b] = mx;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int64_t b = 1; b < nb; ++b) bmax[b] = fmaxf(bmax[b - 1], bmax[b]);
  __syncthreads();
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t j = first_cand(a, c, b) + threadIdx.x; j < first_cand(a, c, b + 1); j += blockDim.x)
      sc[j] = exp_cr(sc[j] - bmax[b]);
  __syncthreads();
  float l = 0.f, m = -INFINITY;
  for (int64_t b = 0; b < nb; ++b) {
    float bs = 0.f;
    for (int64_t j = first_cand(a, c, b); j < first_cand(a, c, b + 1); ++j) bs = __fadd_rn(bs, sc[j]);
    l = __fadd_rn(__fmul_rn(l, exp_cr(m - bmax[b])), bs);
    m = bmax[b];
  }
  l = __fadd_rn(l, exp_cr(sink - m));
  if (a.bf16_probs) {
    __syncthreads();  // every thread has summed the unrounded values
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
    __syncthreads();
  }
  return l;
}

// P.V: each thread owns kPvDims output dims (d0, d0 + blockDim.x, ...) at a time and walks the
// candidates once for all of them, so a candidate's row is located once per thread (not once per
// dim) and its dims' loads are independent; each dim's sum keeps the candidate order.
constexpr int kPvDims = 4;

// o[d] = acc / l with acc = acc * alpha_b + sum_{j in b} p_j v_j[d], block after block.
__device__ void blocked_pv(const SparseAttnArgs& a, const RowCtx& c, const float* sc, const float* bmax, int64_t nb,
                           float l, float* o) {
  const int64_t step = blockDim.x;
  for (int64_t d0 = threadIdx.x; d0 < a.Dh; d0 += step * kPvDims) {
    float acc[kPvDims], part[kPvDims];
    for (int u = 0; u < kPvDims; ++u) acc[u] = 0.f;
    float m = -INFINITY;
    for (int64_t b = 0; b < nb; ++b) {
      for (int u = 0; u < kPvDims; ++u) part[u] = 0.f;
      for (int64_t j = first_cand(a, c, b); j < first_cand(a, c, b + 1); ++j) {
        const Cand vj = candidate(a, c, j, nullptr);
        if (!vj) continue;
#pragma unroll
        for (int u = 0; u < kPvDims; ++u)
          if (d0 + u * step < a.Dh) part[u] = __fadd_rn(part[u], __fmul_rn(sc[j], cand_value(a, vj, d0 + u * step)));
      }
      const float alpha = exp_cr(m - bmax[b]);
#pragma unroll
      for (int u = 0; u < kPvDims; ++u) acc[u] = __fadd_rn(__fmul_rn(acc[u], alpha), part[u]);
      m = bmax[b];
    }
#pragma unroll
    for (int u = 0; u < kPvDims; ++u)
      if (d0 + u * step < a.Dh) {
        const float y = acc[u] / l;
        o[d0 + u * step] = a.round_out ? round_bf16(y) : y;
      }
  }
}

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(SparseAttnArgs a) {
  extern __shared__ float smem[];  // q [Dh], then the scores [max_cand] unless a.scratch is set
  __shared__ float red[kMaxWarps];
  __shared__ float bmax[kMaxProbBlocks];
  const int64_t bh = a.row0 * a.H + blockIdx.x, row = bh / a.H, h = bh % a.H;
  const int64_t Dh = a.Dh;
  if (a.row_seq[row] < 0) {  // a row no sequence covers: zeros, as the CPU leaves it
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) a.out[bh * Dh + d] = 0.f;
    return;
  }
  const RowCtx c = row_ctx(a, row);
  float* qs = smem;
  float* sc = a.scratch ? a.scratch + static_cast<int64_t>(blockIdx.x) * a.max_cand : smem + Dh;
  const float* qg = a.q + (row * a.H + h) * Dh;
  for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) qs[d] = qg[d];
  __syncthreads();

  // Pass 1: scores. Each group of 8 lanes scores one candidate in exactly the CPU's order
  // (kernels/cpu_order.h), so the scores, and the `faithful` bf16 probabilities after them, are
  // bitwise the CPU's.
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nwarps = blockDim.x / kWarp;
  constexpr int kGroups = kWarp / 8;
  const int grp = lane / 8, sub = lane % 8;
  for (int64_t j0 = static_cast<int64_t>(warp) * kGroups; j0 < c.nc; j0 += static_cast<int64_t>(nwarps) * kGroups) {
    const int64_t j = j0 + grp;
    int64_t bad = -1;
    const Cand kj = j < c.nc ? candidate(a, c, j, &bad) : Cand{};
    const float p = cpu_order_sum8([&](int64_t d) { return kj ? __fmul_rn(qs[d], cand_value(a, kj, d)) : 0.f; }, Dh, sub);
    if (sub != 0 || j >= c.nc) continue;
    if (!kj) {
      sc[j] = -INFINITY;
      if (bad >= 0 && atomicCAS(&a.err->flag, 0, 1) == 0) {
        a.err->pos = c.t;
        a.err->entry = bad;
        a.err->visible = c.visible;
      }
      continue;
    }
    sc[j] = __fmul_rn(p, a.scale);
  }
  __syncthreads();
  if (a.prob_block > 0) {
    const int64_t last = c.nc - 1, nb = (last < c.nwin ? last : c.wslots + (last - c.nwin)) / a.prob_block + 1;
    const float sink = weight_at(a.sink, h / a.sink.cols, h % a.sink.cols);
    const float l = blocked_softmax(a, c, sink, sc, bmax, nb);
    blocked_pv(a, c, sc, bmax, nb, l, a.out + (row * a.H + h) * Dh);
    return;
  }
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) mx = fmaxf(mx, sc[j]);
  mx = block_max(mx, red);  // also a barrier: every score is written

  // exp(s - M); a skipped slot (-inf) becomes 0 and adds nothing below.
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = exp_cr(sc[j] - mx);
  __syncthreads();
  float sum = 0.f;  // every thread sums in candidate order, like the CPU
  for (int64_t j = 0; j < c.nc; ++j) sum = __fadd_rn(sum, sc[j]);
  sum = __fadd_rn(sum, exp_cr(weight_at(a.sink, h / a.sink.cols, h % a.sink.cols) - mx));  // the sink: a logit with a zero value
  if (a.bf16_probs) {  // the release multiplies V by bf16 P (the denominator keeps f32 P)
    __syncthreads();   // every thread has summed the unrounded values
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
    __syncthreads();
  }

  float* o = a.out + (row * a.H + h) * Dh;
  const int64_t step = blockDim.x;
  for (int64_t d0 = threadIdx.x; d0 < Dh; d0 += step * kPvDims) {  // as blocked_pv: kPvDims dims a pass
    float acc[kPvDims];
    for (int u = 0; u < kPvDims; ++u) acc[u] = 0.f;
    for (int64_t j = 0; j < c.nc; ++j) {
      const Cand vj = candidate(a, c, j, nullptr);
      if (!vj) continue;
#pragma unroll
      for (int u = 0; u < kPvDims; ++u)
        if (d0 + u * step < Dh) acc[u] = __fadd_rn(acc[u], __fmul_rn(sc[j], cand_value(a, vj, d0 + u * step)));
    }
#pragma unroll
    for (int u = 0; u < kPvDims; ++u)
      if (d0 + u * step < Dh) {
        const float y = acc[u] / sum;
        o[d0 + u * step] = a.round_out ? round_bf16(y) : y;
      }
  }
}

// ---- window update

__global__ void copy_rows_kernel(const RowCopy* jobs, const float* src, int64_t row_size) {
  const RowCopy j = jobs[blockIdx.x];
  const float* s = src + j.src_row * row_size;
  for (int64_t i = threadIdx.x; i < row_size; i += blockDim.x) j.dst[i] = s[i];
}

// ---- MLA

__global__ void __launch_bounds__(kThreads) mla_kernel(MlaArgs a) {
  extern __shared__ float smem[];  // q_lat [R], q_pe [P], then the scores unless a.scratch is set
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

int64_t sparse_attention_smem_cands(int64_t Dh) {
  return static_cast<int64_t>((kSmemBytes - sizeof(float) * (kMaxProbBlocks + kMaxWarps)) / sizeof(float)) - Dh;
}

int64_t sparse_attention_max_prob_blocks() { return kMaxProbBlocks; }

gpuError_t sparse_attention(const SparseAttnArgs& a, gpuStream_t s) {
  if (a.rows * a.H > 0) {
    const std::size_t smem = static_cast<std::size_t>(a.Dh + (a.scratch ? 0 : a.max_cand)) * sizeof(float);
    sparse_attention_kernel<<<static_cast<unsigned>(a.rows * a.H), kThreads, smem, s>>>(a);
  }
  return gpuGetLastError();
}

gpuError_t copy_rows_to(const RowCopy* jobs, int64_t n_jobs, const float* src, int64_t row_size, gpuStream_t s) {
  if (n_jobs > 0 && row_size > 0) copy_rows_kernel<<<static_cast<unsigned>(n_jobs), kThreads, 0, s>>>(jobs, src, row_size);
  return gpuGetLastError();
}

int64_t mla_attention_smem_cands(int64_t R, int64_t P) {
  return static_cast<int64_t>(kSmemBytes / sizeof(float)) - R - P;
}

gpuError_t mla_attention(const MlaArgs& a, gpuStream_t s) {
  if (a.rows * a.H > 0) {
    const std::size_t smem = static_cast<std::size_t>(a.R + a.P + (a.scratch ? 0 : a.max_cand)) * sizeof(float);
    mla_kernel<<<static_cast<unsigned>(a.rows * a.H), kThreads, smem, s>>>(a);
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k
