#pragma once
// What the sparse attention kernels share (kernel-only header: .cu files only): a query row's
// candidates (window positions, then compressed entries), the softmax forms of the CPU's
// cpu_attention.cpp (plain, and the release kernel's blocked online form). Both kernels
// (sparse_attention.cu: a block walks a row's candidates for one or two heads;
// sparse_attention_split.cu: scores, then softmax and P.V, in separate launches for decode-sized
// batches) compute every value in the same order, so either is bitwise the CPU's.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/block_reduce.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/index_row.h"

namespace plumb::gpu::k::attn {

constexpr int kMaxProbBlocks = 512;  // running block maxima of the blocked softmax, per head
constexpr std::size_t kSmemBytes = 48 * 1024;  // shared memory a kernel may use without an opt-in

// sparse_attention_split.cu's launches (sparse_attention() calls it for SparseAttnArgs::split).
gpuError_t split_attention(const SparseAttnArgs& a, gpuStream_t s);
// sparse_attention_pv_mma.cu: the split form's P.V on the matrix unit (SparseAttnArgs::pv_mma).
gpuError_t pv_mma(const SparseAttnArgs& a, gpuStream_t s);
// sparse_attention_scores_mma.cu: the split form's scores on the matrix unit (SparseAttnArgs::scores_mma).
gpuError_t scores_mma(const SparseAttnArgs& a, gpuStream_t s);

// Row stride of the staged q and tile rows: a multiple of 8 that is 8 mod 32, so the 8-lane
// groups of a warp (one tile row each) read distinct banks.
PLUMB_HD int64_t padded_dim(int64_t Dh) { return (Dh + 31) / 32 * 32 + 8; }

struct RowCtx {
  AttnSeq sq;
  int64_t row, t, lo, nwin, visible, nc;
  int64_t wslots;  // the release's window part of the index row (index_row.h)
};

__device__ inline RowCtx row_ctx(const SparseAttnArgs& a, int64_t row) {
  RowCtx c;
  c.sq = a.seqs[a.row_seq[row]];
  c.row = row;
  c.t = c.sq.start + (row - c.sq.row);
  c.lo = c.t - a.W + 1 > 0 ? c.t - a.W + 1 : 0;
  c.nwin = c.t - c.lo + 1;
  c.visible = a.ratio > 0 ? (c.t + 1) / a.ratio : 0;
  c.nc = c.nwin + (a.ratio > 0 ? (a.selected ? a.K : c.visible) : 0);
  c.wslots = backend::index_row_window_slots(c.t, c.sq.prefill, a.W);
  return c;
}

// A candidate's key/value row: an f32 row (window positions, f32 pools) or an encoded pool row.
struct Cand {
  const float* f = nullptr;
  const uint8_t* enc = nullptr;
};

__device__ inline Cand compressed_cand(const SparseAttnArgs& a, const RowCtx& c, int64_t e) {
  Cand r;
  if (a.recent_positions > 0 && e >= backend::kv_recent_first(c.t, a.recent_positions, a.ratio)) {
    const int64_t first_new = c.sq.start / a.ratio;  // the host checked the ring holds the rest
    r.f = e >= first_new ? c.sq.fresh + (e - first_new) * a.Dh : c.sq.recent + (e % c.sq.recent_rows) * a.Dh;
    return r;
  }
  if (c.sq.decoded) {
    r.f = c.sq.decoded + e * a.Dh;
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
__device__ inline Cand candidate(const SparseAttnArgs& a, const RowCtx& c, int64_t j, int64_t* bad) {
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
  if (a.selected_rows) {
    Cand r;
    r.f = a.selected_rows + (c.row * a.K + j) * a.Dh;
    return r;
  }
  return compressed_cand(a, c, e);
}

// The first selected entry a query cannot see (candidate()'s *bad, -1 for none) goes to a.err.
__device__ inline void report_invisible(const SparseAttnArgs& a, const RowCtx& c, int64_t bad) {
  if (bad >= 0 && atomicCAS(&a.err->flag, 0, 1) == 0) {
    a.err->pos = c.t;
    a.err->entry = bad;
    a.err->visible = c.visible;
  }
}

// A (row, head)'s scratch (SparseAttnArgs::head_stride floats): the scores [max_cand] (the softmax
// launch turns them into e_j), then the block maxima [max_prob_blocks] and the denominator.
__device__ inline float* head_scores(const SparseAttnArgs& a, int64_t row, int64_t h) {
  return a.scratch + ((row - a.row0) * a.H + h) * a.head_stride;
}
struct SoftmaxTail {
  float* bmax;
  float* l;
};
__device__ inline SoftmaxTail softmax_tail(const SparseAttnArgs& a, int64_t row, int64_t h) {
  float* t = head_scores(a, row, h) + a.max_cand;
  return {t, t + a.max_prob_blocks};
}

// ---- the release kernel's blocked online softmax (SparseAttnArgs::prob_block, cpu_attention.cpp)
// Candidate j sits at slot j (window) or wslots + (j - nwin) (compressed) of the index row; block
// b holds slots [b*B, (b+1)*B), i.e. candidates [first_cand(b), first_cand(b + 1)).
__device__ inline int64_t first_cand(const SparseAttnArgs& a, const RowCtx& c, int64_t b) {
  const int64_t s0 = b * a.prob_block;
  const int64_t j = s0 < c.nwin ? s0 : (s0 < c.wslots ? c.nwin : c.nwin + (s0 - c.wslots));
  return j < c.nc ? j : c.nc;
}

// The softmax blocks of row c's index row (slots / prob_block, rounded up); 0 for the plain form.
__device__ inline int64_t prob_blocks(const SparseAttnArgs& a, const RowCtx& c) {
  if (a.prob_block <= 0) return 0;
  const int64_t last = c.nc - 1;
  return (last < c.nwin ? last : c.wslots + (last - c.nwin)) / a.prob_block + 1;
}

// One output's P.V sum in candidate order. In the blocked form a block's products go to part and
// closing the block with its running max m_b folds them in: acc = acc * exp(m - m_b) + part.
struct PvSum {
  float acc = 0.f, part = 0.f, m = -INFINITY;
  __device__ void add(float pv, bool blocked) {
    if (blocked) part = __fadd_rn(part, pv);
    else acc = __fadd_rn(acc, pv);
  }
  __device__ void close_block(float mb) {
    acc = __fadd_rn(__fmul_rn(acc, exp_cr(m - mb)), part);
    part = 0.f;
    m = mb;
  }
};

// Shared memory of blocked_softmax: per softmax block its running max, its sum of e_j and its
// alpha (the factor that carries the denominator over from the block before).
struct BlockedParts {
  float max[kMaxProbBlocks], sum[kMaxProbBlocks], alpha[kMaxProbBlocks];
};

// sc holds the scores (-inf for a skipped slot). Every block's running max goes to bmax, the
// scores become e_j = exp(s_j - m_b) (then bf16 with bf16_probs), and each thread gets
// l = sum over blocks of (l * alpha_b + sum e_j) + exp(sink - m), in the CPU's order. A block
// without a candidate keeps m (alpha = 1) and adds 0, as the CPU's skipping it does.
// Each block's max, sum and alpha depend only on that block's values, so thread b forms block
// b's (serially, in candidate order) and only the nb-step chain over the blocks is left to every
// thread: the chain over all nc candidates was a CSA row's 640 steps (PERF.md v37).
// es (null: none): shared memory for the row's nc scores, which the serial loops then read
// instead of sc: from global memory, each of them was a chain of round trips (~20 us for 640
// candidates, PERF.md v22).
__device__ inline float blocked_softmax(const SparseAttnArgs& a, const RowCtx& c, float sink, float* sc, float* bmax,
                                        int64_t nb, BlockedParts& p, float* es = nullptr) {
  if (es) {
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) es[j] = sc[j];
    __syncthreads();
  }
  const float* v = es ? es : sc;
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x)
    p.max[b] = fold_in_order(-INFINITY, v, first_cand(a, c, b), first_cand(a, c, b + 1), max_fold);
  __syncthreads();
  if (threadIdx.x == 0)
    for (int64_t b = 1; b < nb; ++b) p.max[b] = fmaxf(p.max[b - 1], p.max[b]);
  __syncthreads();
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) bmax[b] = p.max[b];
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t j = first_cand(a, c, b) + threadIdx.x; j < first_cand(a, c, b + 1); j += blockDim.x) {
      const float e = exp_cr(v[j] - p.max[b]);
      sc[j] = e;
      if (es) es[j] = e;  // (only this thread reads and writes es[j] until the barrier)
    }
  __syncthreads();
  for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
    p.sum[b] = fold_in_order(0.f, v, first_cand(a, c, b), first_cand(a, c, b + 1), sum_fold);
    p.alpha[b] = exp_cr((b > 0 ? p.max[b - 1] : -INFINITY) - p.max[b]);
  }
  __syncthreads();
  float l = 0.f;
  for (int64_t b = 0; b < nb; ++b) l = __fadd_rn(__fmul_rn(l, p.alpha[b]), p.sum[b]);
  l = __fadd_rn(l, exp_cr(sink - p.max[nb - 1]));
  if (a.bf16_probs) {
    __syncthreads();  // every thread has summed the unrounded values
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
    __syncthreads();
  }
  return l;
}


// The plain softmax of one head's scores in place: exp(s - max), the denominator (with the sink)
// summed in candidate order by every thread (from es, as blocked_softmax's, when given), then bf16
// P when the release multiplies V by it.
__device__ inline float plain_softmax(const SparseAttnArgs& a, const RowCtx& c, float sink, float* sc, float* red,
                                      float* es = nullptr) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) mx = fmaxf(mx, sc[j]);
  mx = block_max(mx, red);  // also a barrier: every score is written
  // exp(s - M); a skipped slot (-inf) becomes 0 and adds nothing below.
  for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) {
    const float e = exp_cr(sc[j] - mx);
    sc[j] = e;
    if (es) es[j] = e;
  }
  __syncthreads();
  float sum = fold_in_order(0.f, es ? es : sc, 0, c.nc, sum_fold);
  sum = __fadd_rn(sum, exp_cr(sink - mx));  // the sink: a logit with a zero value
  __syncthreads();  // every thread has summed the unrounded values
  if (a.bf16_probs)
    for (int64_t j = threadIdx.x; j < c.nc; j += blockDim.x) sc[j] = round_bf16(sc[j]);
  __syncthreads();
  return sum;
}

}  // namespace plumb::gpu::k::attn
