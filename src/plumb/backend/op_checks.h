#pragma once
// The preconditions of every Backend op (backend.h), written once, in the spirit of ggml, where an
// op's shapes are asserted once when the op is built and backends only compute. Each backend calls
// check_<op>() before it computes: every backend then refuses the same bad calls with the same
// plumb::Error (tests/backend/op_checks_test.cpp holds them to it), and gets back the sizes the op
// derives from its operands.
//
// Not here: limits of one backend's kernels (shared memory, grid sizes, head dims a kernel was
// written for), which are facts about that backend, not about the op; and element types, which
// each backend's tensor accessors check (f32(), dev_f32()) when they read an operand.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"

namespace plumb::backend {

// ---- memory
// Equal row sizes and element types, row ranges inside both tensors.
void check_copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n);
// As many source as destination runs of n rows, inside t; no destination run overlaps another run.
void check_copy_row_runs(const Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n);

// ---- paged caches (backend.h): tables with one row per sequence of the call (and, when they
// have ids, their device copy); a pool of [blocks * per_block] rows of row_size values in the
// cache's format (f32 values, or i32 words of encoded rows: kv_row.h); and, per sequence, a
// table covering `entries` entries with ids of blocks inside the pool. `what` names the cache.
void check_block_tables(const BlockTables& t, std::size_t seqs, const char* op);
void check_paged(const PagedCache& c, const BlockTables& t, std::size_t seq, int64_t entries, int64_t row_size,
                 const char* op, const char* what);
void check_paged_write(const PagedCache& c, const BlockTables& t, const Tensor& src, std::span<const CacheRun> runs);

// ---- elementwise and normalization
// Every id inside [0, vocab): embed() reads the ids on the host, so the check needs their values.
void check_token_ids(std::span<const int32_t> ids, int64_t vocab);
// embed()'s host copy of the ids, when given, holds one per id.
void check_embed_host_ids(std::span<const int32_t> host_ids, int64_t n);
void check_repeat_rows(int64_t copies);
void check_rms_norm(const Tensor& x, const WeightView* weight, NormMath math);
void check_add(const Tensor& a, const Tensor& b);
void check_columns(const Tensor& x, int64_t begin, int64_t count);

// ---- projections
struct LinearDims {
  int64_t groups = 1, rows_per_group = 0, K = 0;  // weight [groups * rows_per_group, K]
  int64_t in = 0;                                 // last dim of x (= groups * K)
  int64_t N = 0;                                  // vectors of x
  Shape out;                                      // x's shape with the last dim groups * rows_per_group
};
LinearDims check_linear(const Tensor& x, const WeightView& w, const LinearOpts& o);

// ---- rotary embedding and simulated quantization
void check_rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
void check_quant_fp8(const Tensor& x, int64_t cols, int64_t block);
void check_quant_fp4(const Tensor& x, int64_t block);
void check_hadamard(const Tensor& x);

// ---- mHC: X is [N, hc, D]
struct HcDims {
  int64_t N = 0, hc = 0, D = 0;
};
HcDims check_hc_pre(const Tensor& X, const HcParams& p);
HcDims check_hc_head(const Tensor& X, const HcParams& p);
HcDims check_hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb);

// ---- ragged batches: every sequence's rows inside the batch's N rows, no negative length or
// start position
void check_batch(const Batch& b, int64_t N, const char* op);

// ---- compressor and indexer
struct CompressDims {
  bool overlap = false;  // ratio 4: two halves of channels over two windows
  int64_t C = 0;         // channels per row: c * head_dim
  int64_t slots = 0;     // state slots: c * ratio
  int64_t entries = 0;   // pooled entries this call closes, over all sequences
};
CompressDims check_compress(const Tensor& kv, const Tensor& score, const Batch& b,
                            std::span<const CompressorState> states, const CompressorParams& p);

struct IndexerDims {
  int64_t N = 0, H = 0, di = 0;  // q [N, H, di]
};
IndexerDims check_indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                               const BlockTables& tables, const IndexerParams& p);

// ---- attention
struct AttentionDims {
  int64_t N = 0, H = 0, Dh = 0;  // q [N, H, Dh]
  int64_t K = 0;                 // selected entries per query (0 without a selection)
};
AttentionDims check_sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                     const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                                     const AttentionParams& p);
// A selected entry the query at `pos` cannot see yet: found while computing (the values live in
// the selection), so each backend reports it through this one message.
[[noreturn]] void fail_invisible_entry(int64_t pos, int64_t entry, int64_t visible);
void check_window_update(std::span<const Tensor> rings, const Tensor& kv, const Batch& b);

struct MlaDims {
  int64_t N = 0, H = 0, R = 0, P = 0;  // q_lat [N, H, R], q_pe [N, H, P]
};
MlaDims check_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                            const PagedCache& k_pe, const BlockTables& tables);

// ---- mixture of experts
struct RouteDims {
  int64_t N = 0, D = 0;      // x [N, D]
  int64_t E = 0, K = 0;      // experts, top_k
  int64_t G = 1, TG = 1;     // groups, groups kept (G = 1: no groups)
};
RouteDims check_route(const Tensor& x, const Tensor& ids, const RouteParams& p);
// Hash routing: tid2eid[id][0..top_k) for every id, checked ([N * top_k], row-major). The table is
// the checkpoint's host memory (I32 or I64).
std::vector<int32_t> hash_experts(const WeightView& tid2eid, std::span<const int32_t> ids, int64_t top_k,
                                  int64_t n_experts);

struct MoeDims {
  int64_t N = 0, D = 0, K = 0;  // x [N, D], K experts per row
  int64_t shared_I = 0;         // the shared expert's intermediate size
};
// The routing and the shared expert; the routed experts are checked by check_swiglu as a call uses
// them (an expert no row selects may be absent).
MoeDims check_moe(const Tensor& x, const Routing& r, const SwiGluWeights& shared);
// The routing alone (moe_terms: no shared expert); shared_I stays 0.
MoeDims check_moe_routing(const Tensor& x, const Routing& r);
// One SwiGLU expert's weights (w1, w3 [I, D], w2 [D, I]); returns I. `which` names it in the
// message ("shared expert", "routed expert 7").
int64_t check_swiglu(const SwiGluWeights& w, int64_t D, const std::string& which);

}  // namespace plumb::backend
