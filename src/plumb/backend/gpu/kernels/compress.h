#pragma once
// Launchers of the compressor state machine (MODEL-SPEC 3.4) and the Lightning indexer's scores
// and top-k (3.5). The host side (gpu_compress.cpp) checks shapes and builds the per-sequence
// tables below; kernels include no plumb host headers.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// One sequence of a compress batch.
struct CompSeq {
  float* kv = nullptr;     // state [c*m, c*d], updated in place
  float* score = nullptr;  // state [c*m, c*d], updated in place
  int64_t row = 0, start = 0, len = 0;
  int64_t out_base = 0;  // first output entry of this sequence
};

struct CompressArgs {
  const float* kv = nullptr;     // [rows, c*d]
  const float* score = nullptr;  // [rows, c*d]
  const CompSeq* seqs = nullptr;
  int64_t n_seqs = 0;
  WeightRef ape;         // m * c*d values, row-major [m, c*d]
  float* out = nullptr;  // [entries, d]
  int64_t m = 0, d = 0;
  bool overlap = false, round_out = false;
};
gpuError_t compress(const CompressArgs& a, gpuStream_t s);
// The same results for chunks of many tokens (prefill), in two launches: every closed window
// pooled by its own threads, then the states advanced. entry_seq [entries] (device): the sequence
// of each output entry.
gpuError_t compress_chunks(const CompressArgs& a, const int32_t* entry_seq, int64_t entries, gpuStream_t s);

struct IdxSeq {
  const int32_t* blocks = nullptr;  // the sequence's block table row (device), null without entries
  int64_t row = 0, start = 0, len = 0;
};

struct IndexerArgs {
  const float* q = nullptr;  // [N, H, di]
  const float* w = nullptr;  // [N, H]
  const IdxSeq* seqs = nullptr;
  const int32_t* row_seq = nullptr;  // [N], -1 for a row no sequence covers
  PagedRef keys;                     // the key pool (rows of di values)
  float* scores = nullptr;           // scratch [N, max_n]
  int32_t* out = nullptr;            // [N, K]
  int64_t N = 0, H = 0, di = 0, K = 0, m = 0, max_n = 0;
  float relu_scale = 1.f;
  bool bf16 = false;
};
gpuError_t indexer_topk(const IndexerArgs& a, gpuStream_t s);
// Whether the kernels can score keys of di values for H heads and rank a top_k of K (a key row
// and its heads' terms, and the sort buffer, live in shared memory).
bool indexer_topk_supported(int64_t K, int64_t H, int64_t di);

}  // namespace plumb::gpu::k
