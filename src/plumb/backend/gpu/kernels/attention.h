#pragma once
// Launchers of the attention kernels (sparse attention with sink, window ring update, absorbed
// MLA). The host side (gpu_attention.cpp) checks shapes and builds the per-sequence tables below,
// uploads them and passes their device addresses; kernels include no plumb host headers.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// One sequence of a sparse_attention batch (device table, one entry per sequence).
struct AttnSeq {
  const float* ring = nullptr;      // [W, Dh]
  const float* recent = nullptr;    // --kv-bf16-recent: the ring [recent_rows, Dh] (backend.h RecentEntries)
  const float* fresh = nullptr;     // and this call's new entries of the sequence, from its first
  int64_t recent_rows = 0;
  const int32_t* blocks = nullptr;  // the sequence's block table row (device), null without entries
  int64_t row = 0, start = 0, len = 0;
  int64_t prefill = 0;  // backend::prefill_of: the index row's window part (index_row.h)
  // The sequence's compressed entries decoded to f32 rows ([entries, Dh], entry e at e * Dh) by
  // decode_attention_entries, which candidates read instead of the pool; null: from the pool.
  float* decoded = nullptr;
};

// Reported by sparse_attention when a selected index is not visible to its query (first one
// found wins): flag = 1, then the query's position, the entry and the visible count.
struct AttnError {
  int32_t flag = 0;
  int32_t pad = 0;
  int64_t pos = 0, entry = 0, visible = 0;
};

struct SparseAttnArgs {
  const float* q = nullptr;   // [N, H, Dh]
  const float* kv = nullptr;  // [N, Dh]
  const AttnSeq* seqs = nullptr;
  const int32_t* row_seq = nullptr;   // [N]: sequence of each row
  const int32_t* selected = nullptr;  // [N, K] or null
  PagedRef comp;                      // the compressed pool (rows of Dh values), pool null without entries
  WeightRef sink;                     // [H]
  float* out = nullptr;               // [N, H, Dh]
  float* scratch = nullptr;  // [rows * H, head_stride] when scores do not fit in shared memory, else null
  int64_t head_stride = 0;   // sparse_attention_scratch_floats(): scratch floats per (row, head)
  int64_t max_prob_blocks = 0;  // the split kernels' block maxima per (row, head) in the scratch
  AttnError* err = nullptr;
  int64_t row0 = 0, rows = 0;  // this launch's query rows [row0, row0 + rows) (chunks bound the scratch)
  int64_t N = 0, H = 0, Dh = 0, W = 0, ratio = 0, K = 0;
  int64_t max_cand = 0;  // upper bound of any row's candidate count (window + compressed)
  float scale = 1.f;
  bool bf16_probs = false, round_out = false;
  int64_t prob_block = 0;  // AttentionParams::prob_block: the release kernel's online softmax blocks
  int64_t recent_positions = 0;  // > 0: RecentEntries::positions (AttnSeq recent / fresh)
  int64_t heads_per_block = 1;   // set by sparse_attention (its launch shape)
  bool split = false;  // the split kernels (sparse_attention_split() held; scratch given)
  int64_t pv_heads = 0;  // the most heads a split P.V block takes; 0: by the launch's size
  int64_t scores_span = 0;  // candidate tiles a split scores block takes (1-4); 0: by the launch's size
  // The split form's scores and P.V on the matrix unit's bf16 tiles (sparse_attention_scores_mma.cu,
  // sparse_attention_pv_mma.cu): the fast order, for Dh % 64 == 0 (the P.V also for bf16_probs);
  // mma_matrix: the matrix unit (else the tiles' SIMT loop).
  bool scores_mma = false, pv_mma = false, mma_matrix = false;
  // [N * K, Dh]: each row's selected entries decoded once by decode_selected_entries (slot j of
  // row n at (n * K + j) * Dh), which candidates read instead of their source; null: not decoded.
  float* selected_rows = nullptr;
};
gpuError_t sparse_attention(const SparseAttnArgs& a, gpuStream_t s);
// Decodes every compressed entry of each of the n_seqs sequences that has AttnSeq::decoded
// (entries 0 .. (start + len) / ratio - 1) from the encoded pool a.comp into that array: the
// same values the kernels' reads decode (kv_value is exact), once per call instead of once per
// read. A prefill chunk's rows read each entry thousands of times (PERF.md v26).
gpuError_t decode_attention_entries(const SparseAttnArgs& a, int64_t n_seqs, gpuStream_t s);
// Decodes (or copies) every visible selected entry of every query row into a.selected_rows from
// where the kernels would read it (the pool, the recent ring, the fresh entries): a decode step
// reads few entries, but its split P.V decodes each of them once per head block (PERF.md v31).
gpuError_t decode_selected_entries(const SparseAttnArgs& a, gpuStream_t s);
// Whether the split form's scores and P.V on the matrix unit can take heads of Dh (64-wide tiles).
bool sparse_attention_mma(int64_t Dh);
// Whether rows of up to max_cand candidates take the split kernels (scores for 8 heads x 8
// candidates a block, the softmax per (row, head), then P.V per (1-8 heads, 256 dims)): any batch
// whose candidates fit the P.V kernel's shared memory. The host sets SparseAttnArgs::split from it and then passes the
// score scratch ([rows * H, max_cand] floats).
bool sparse_attention_split(int64_t Dh, int64_t max_cand);
// Scratch floats per (row, head): the scores (max_cand), and for the split kernels the softmax's
// block maxima (max_prob_blocks) and denominator.
inline int64_t sparse_attention_scratch_floats(int64_t max_cand, int64_t max_prob_blocks, bool split) {
  return max_cand + (split ? max_prob_blocks + 1 : 0);
}
// Largest candidate count whose scores sparse_attention keeps in shared memory for head dim Dh.
int64_t sparse_attention_smem_cands(int64_t Dh);
// Most softmax blocks (index-row slots / prob_block, rounded up) one row may have.
int64_t sparse_attention_max_prob_blocks();

// One row copy of window_update: kv row src_row goes to dst (a ring slot).
struct RowCopy {
  float* dst = nullptr;
  int64_t src_row = 0;
};
gpuError_t copy_rows_to(const RowCopy* jobs, int64_t n_jobs, const float* src, int64_t row_size, gpuStream_t s);

struct MlaSeq {
  const int32_t* blocks = nullptr;  // the sequence's block table row (device)
  int64_t row = 0, start = 0, len = 0;
};

struct MlaArgs {
  const float* q_lat = nullptr;  // [N, H, R]
  const float* q_pe = nullptr;   // [N, H, P]
  const MlaSeq* seqs = nullptr;
  const int32_t* row_seq = nullptr;  // [N]
  PagedRef latent, k_pe;             // the pools (rows of R and of P values)
  float* out = nullptr;              // [N, H, R]
  float* scratch = nullptr;          // [rows * H, max_cand] when scores do not fit in shared memory
  int64_t row0 = 0, rows = 0;        // this launch's query rows
  int64_t N = 0, H = 0, R = 0, P = 0;
  int64_t max_cand = 0;  // largest start + len of any sequence
  float scale = 1.f;
  // bf16: the V3 release's bf16 einsums (MlaParams::round): s = bf16(bf16(bf16(q_lat.c) +
  // bf16(q_pe.k_pe)) * scale), p = bf16(softmax), o = bf16(p.c). cpu_order: the score dot products
  // summed sequentially by one lane, as cpu_mla.cpp does (else a warp sum).
  bool bf16 = false, cpu_order = false;
};
gpuError_t mla_attention(const MlaArgs& a, gpuStream_t s);
int64_t mla_attention_smem_cands(int64_t R, int64_t P);

}  // namespace plumb::gpu::k
