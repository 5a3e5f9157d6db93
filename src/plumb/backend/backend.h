#pragma once
// The op interface the DeepSeek-V4 forward is written against (ARCHITECTURE idea 1). Every op
// takes and returns backend-owned Tensors; weights are passed as the checkpoint's WeightViews
// (quantized weights stay quantized: an op decodes what it needs; a GPU backend may keep a device
// copy keyed by the view's data pointer). Ops carry no model logic beyond what their comment
// defines: which rows attend to what, which quantization points apply, and which positions are
// used are decided by the model and passed in.
//
// Numerics: an op computes in f32. `Round::BF16` rounds the op's result to bf16 (round to
// nearest even), which is how the `faithful` profile reproduces the release's bf16 activations;
// `Round::None` keeps f32 (the `reference` profile).
//
// Ragged batches: a batch is a set of sequences whose tokens are stacked along the first (row)
// dimension; Batch says which rows belong to which sequence and at which positions. Ops that
// read per-sequence fixed state (window rings, compressor state) take one Tensor per sequence,
// in Batch order; the growing caches (compressed entries, indexer keys, MLA latents and rope
// keys) are paged: one pool per cache shared by every sequence, read through block tables.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "plumb/backend/index_row.h"
#include "plumb/backend/kv_row.h"
#include "plumb/backend/tensor.h"
#include "plumb/format/weight_view.h"

namespace plumb::backend {

enum class Round { None, BF16 };

struct SeqSlice {
  int64_t row = 0;    // first row of this sequence in the batch tensors
  int64_t len = 0;    // number of new tokens
  int64_t start = 0;  // absolute position of the first new token
};

struct Batch {
  std::vector<SeqSlice> seqs;
  int64_t rows = 0;  // total tokens = sum of len
};

// Paged caches (issue #15): a cache's pool holds fixed-size blocks of `per_block` entries, and
// each sequence of a batch has a table of block ids, one id space for every pool of a model (a
// block is B native token positions: B/ratio entries of a compressed cache, B of an MLA cache).
// Entry w of sequence s is pool row table[s][w / per_block] * per_block + w % per_block.
struct BlockTables {
  int64_t seqs = 0;          // sequences (table rows)
  int64_t width = 0;         // ids per sequence; a shorter table is padded with -1
  std::vector<int32_t> ids;  // [sequences, width] row-major, on the host (checks, the CPU)
  Tensor device;             // the same [sequences, width] i32 on the backend (kernels), uploaded
                             // once per forward; undefined when width is 0
  int32_t id(std::size_t seq, int64_t i) const { return ids[seq * static_cast<std::size_t>(width) + static_cast<std::size_t>(i)]; }
};

// A pool stores its rows in one format (kv_row.h): f32 rows are an f32 tensor [blocks *
// per_block, values]; bf16 / fp8 / fp4 rows are an i32 tensor [blocks * per_block, words] of
// encoded bytes. paged_write encodes; the ops that read a cache decode the values they use.
struct PagedCache {
  Tensor pool;
  int64_t per_block = 0;  // entries per block
  KvRowSpec spec;         // the rows' format; values 0 with F32: the pool's row size
  bool encoded() const { return spec.format != KvRowFormat::F32; }
  int64_t values() const { return encoded() || spec.values > 0 ? spec.values : pool.row_size(); }
  // Pool row of entry w of sequence seq (the table is checked to cover it).
  int64_t row(const BlockTables& t, std::size_t seq, int64_t w) const {
    return static_cast<int64_t>(t.id(seq, w / per_block)) * per_block + w % per_block;
  }
};

// Rows one sequence writes into a paged cache: entries [first, first + count).
struct CacheRun {
  int64_t first = 0, count = 0;
};

struct LinearOpts {
  int64_t groups = 1;    // block-diagonal: x [N, G*K] and w [G*R, K] give y [N, G*R], group g
                         // using input cols [gK, (g+1)K) and weight rows [gR, (g+1)R)
  bool act_fp8 = false;  // FP8 e4m3 1x128 ue8m0 round trip of x before the product (MODEL-SPEC 2.2)
  Round out = Round::None;
  // Round every decoded weight value to bf16 before the product: the V3 release's gemm_impl
  // "bf16" (inference/kernel.py weight_dequant: e4m3 value times its f32 block scale in f32,
  // stored as bf16; then F.linear on bf16). A bf16 weight is unchanged.
  bool bf16_weight = false;
};

enum class NormMath {
  F32,       // y = w * x / sqrt(mean(x^2) + eps) in f32, then the op's Round
  BF16Steps  // every step rounded to bf16: x^2, mean, + eps, rsqrt, product (the release's
             // per-head q normalisation, which runs on bf16 tensors); weight must be null
};

struct HcParams {  // one mHC site (MODEL-SPEC 3.2)
  const WeightView* fn = nullptr;     // [n_out, hc*D] f32
  const WeightView* base = nullptr;   // [n_out]
  const WeightView* scale = nullptr;  // [3] (site) or [1] (head)
  int64_t sinkhorn_iters = 0;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

struct HcPreResult {
  Tensor y;     // [N, D]
  Tensor post;  // [N, hc]
  Tensor comb;  // [N, hc, hc], row-major (i = input stream, j = output stream)
};

// Compressor state of one sequence (MODEL-SPEC 3.4 decode state machine): raw projections a and
// gate logits z (ape included) for c*ratio slots of c*d channels. Fresh state: kv = 0, score = -inf.
struct CompressorState {
  Tensor kv, score;
};

struct CompressorParams {
  int64_t ratio = 0;     // m
  int64_t head_dim = 0;  // d; overlap (c = 2) when ratio == 4, else c = 1
  const WeightView* ape = nullptr;  // [m, c*d] f32
};

struct IndexerParams {
  int64_t ratio = 4;
  int64_t top_k = 0;
  float relu_scale = 1.f;  // score = sum_h w[h] * (relu(q_h . k) * relu_scale)
  Round round = Round::None;  // BF16: q.k, each head term and the sum rounded to bf16
};

// --kv-bf16-recent (sparse_attention): the compressed entries covering the last `positions`
// positions of a query at t (entries w >= floor((t + 1 - positions) / ratio)) are read from bf16
// copies instead of the paged cache: entries this call wrote from `fresh` (the batch's new
// entries, f32 holding bf16 values, row fresh_row[s] + (w - first) for sequence s whose new
// entries start at entry first = start / ratio), older ones from the sequence's ring
// (rings[s] [R, Dh], slot w % R, holding its last R entries before this call). The caller
// updates the rings after the call (window_update over the entries); R = ceil(positions /
// ratio) + 1 holds every entry a query can need.
struct RecentEntries {
  int64_t positions = 0;
  std::span<const Tensor> rings;
  Tensor fresh;                   // [new entries of the batch, Dh]
  std::vector<int64_t> fresh_row;  // per sequence: its first new entry's row in fresh
};

struct AttentionParams {
  int64_t window = 0;  // sliding window size W (includes the query)
  int64_t ratio = 0;   // compressed entries per `ratio` tokens; 0: none
  const WeightView* sink = nullptr;  // [H] f32 logits
  float scale = 1.f;
  bool bf16_probs = false;  // round exp(s - max) to bf16 before P.V (the release's kernel)
  // > 0: the release kernel's online softmax (inference/kernel.py sparse_attn_kernel) over blocks
  // of prob_block slots. Slots: the window part first, its positions oldest first from slot 0,
  // index_row_window_slots(t, P, W) wide (index_row.h: min(P, W) for a query inside its sequence's
  // prefill of P positions, W otherwise); the compressed candidates follow from that width on. Per
  // block b, with m_b the running max: e_j = exp(s_j - m_b), alpha_b = exp(m_{b-1} - m_b),
  // l = l * alpha_b + sum_b e_j, acc = acc * alpha_b + sum_b p_j v_j (p = bf16(e) with
  // bf16_probs); o = acc / (l + exp(sink - m)). 0: one softmax with the row's global max.
  int64_t prob_block = 0;
  Round out = Round::None;
  const RecentEntries* recent = nullptr;  // null: every compressed entry from the paged cache
  // Per sequence of the batch, its prefill length P for prob_block's index row (0 for a sequence,
  // or empty for all: implied_prefill, i.e. a slice from position 0 is the whole prefill). The
  // serving engine gives each request's prompt length, so that a chunked prompt lays out every row
  // as its one-call prefill would.
  std::span<const int64_t> prefill = {};
};

// The prefill length sequence `si` (slice `s`) lays its index rows out by (AttentionParams::prefill,
// checked by check_sparse_attention).
inline int64_t prefill_of(const AttentionParams& p, std::size_t si, const SeqSlice& s) {
  return !p.prefill.empty() && p.prefill[si] > 0 ? p.prefill[si] : implied_prefill(s.start, s.len);
}

struct Routing {
  Tensor experts;  // [N, k] i32
  Tensor weights;  // [N, k] f32 (normalized, route-scaled)
};

enum class Scoring { SqrtSoftplus /* V4 */, Sigmoid /* V3 */ };

struct RouteParams {
  const WeightView* gate = nullptr;     // [E, D]
  const WeightView* bias = nullptr;     // [E] selection bias, or null
  const WeightView* tid2eid = nullptr;  // [vocab, k] hash routing table, or null
  int64_t top_k = 0;
  float route_scale = 1.f;
  Scoring scoring = Scoring::SqrtSoftplus;
  // Group-limited selection (V3 noaux_tc): the E experts form n_group equal groups of
  // consecutive ids; a group's score is the sum of its two best biased scores; only the
  // topk_group best groups (ties to the lower group) compete for top_k. n_group <= 1: no groups.
  int64_t n_group = 1;
  int64_t topk_group = 1;
  // BF16: the V3 release's Gate on bf16 activations (inference/model.py Gate.forward): the gate
  // weight is used as bf16, the gate logits and the scores are rounded to bf16, selection runs on
  // score + bias in f32, and weights = bf16(bf16(s / bf16(sum of the k scores)) * route_scale).
  // None: f32 throughout (the formula above route()).
  Round round = Round::None;
  // With tid2eid: the token ids on the host too, when the caller has them (they must equal
  // route()'s `ids`). A device backend then looks tid2eid up without copying the ids back, which
  // would wait for the device in the middle of a forward. Empty: the ids are read from `ids`.
  std::span<const int32_t> host_ids;
};

struct SwiGluWeights {
  const WeightView* w1 = nullptr;  // gate [I, D]
  const WeightView* w2 = nullptr;  // down [D, I]
  const WeightView* w3 = nullptr;  // up [I, D]
};

struct MoeParams {
  float swiglu_limit = 0.f;   // 0: no clamp
  bool clamp_shared = true;   // apply swiglu_limit to the shared expert too
  bool act_fp8 = false;       // act-quant before w1/w3 and before w2
  Round round = Round::None;  // rounding of each GEMM output, of h before w2, and of the sum
  // The V3 release's bf16 experts (inference/model.py Expert/MLP/MoE.forward) need three more:
  bool bf16_weight = false;     // every expert weight rounded to bf16 before its GEMM (LinearOpts)
  Round silu_out = Round::None;  // rounding of silu(w1 x) before the product with w3 x (F.silu on bf16)
  bool weight_after = false;    // the routing weight scales the expert's output (after w2: expert(x)
                                // * weight) instead of h before w2 (V4)
  // BF16: the routed sum is a bf16 tensor: each weighted expert output is rounded, and the
  // running sum (from zero, experts in id order) is rounded after every add
  // (y = zeros_like(x); y[idx] += expert(x[idx]) * weights[idx, top, None]).
  Round accumulate = Round::None;
};

class Backend;

// side_begin() .. join() as a scope (Backend, "two independent chains"): end() closes the side
// chain, join() joins; the destructor joins at the latest (when an op threw, unwinding).
class SideChain {
 public:
  SideChain(Backend& be, int64_t rows);
  SideChain(const SideChain&) = delete;
  SideChain& operator=(const SideChain&) = delete;
  ~SideChain();
  void end();
  void join();

 private:
  Backend& be_;
  bool ended_ = false, joined_ = false;
};

struct MlaParams {
  float scale = 1.f;
  // BF16: the V3 release's absorbed MLA on bf16 tensors (inference/model.py MLA.forward,
  // attn_impl "absorb"): s_j = bf16(bf16(bf16(q_lat . latent_j) + bf16(q_pe . k_pe_j)) * scale),
  // softmax in f32 rounded to bf16 (p_j = bf16(e^{s_j-M} / sum)), o = bf16(sum_j p_j latent_j).
  // None: f32 throughout.
  Round round = Round::None;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Audit facts for reports (key, value): backend, device, driver/runtime versions, build targets.
  virtual std::vector<std::pair<std::string, std::string>> facts() const { return {{"backend", name()}}; }
  // Waits until every op issued so far has finished (timing; a no-op on synchronous backends). A
  // device backend reports here what only its kernels can detect (sparse_attention: a selected
  // entry the query cannot see), so an op may refuse a call as late as the next synchronize().
  virtual void synchronize() {}
  // Starts or stops the device profiler's capture (an Nsight Compute run with
  // --profile-from-start off records only what lies between; plumb_bench --profile-last-step).
  // Synchronizes first; a no-op on backends without one.
  virtual void profile_capture(bool on) { (void)on; }

  // ---- two independent chains of ops (a hint: no value depends on it)
  // The ops issued between side_begin() and side_end() (the side chain) read only what was
  // issued before side_begin(); the ops issued after side_end() and before join() neither read
  // what the side chain writes nor write what it reads; join() orders every later op after both.
  // A device backend may run the chains at once (the GPU: a second stream, for `rows` up to a
  // decode batch's); the default runs them as issued. side_begin() inside a side chain throws.
  virtual void side_begin(int64_t rows) { (void)rows; }
  virtual void side_end() {}
  virtual void join() {}

  // ---- memory
  virtual Tensor full(ElemType type, Shape shape, float value) = 0;
  virtual Tensor from_host(const float* data, Shape shape) = 0;
  virtual Tensor from_host(const int32_t* data, Shape shape) = 0;
  virtual void to_host(const Tensor& t, float* out) = 0;
  virtual void to_host(const Tensor& t, int32_t* out) = 0;
  // dst rows [dst_row, dst_row + n) = src rows [src_row, src_row + n); equal row sizes.
  virtual void copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) = 0;
  // Writes src's rows (f32), in order, into the paged cache, encoded in its format: sequence s's
  // run takes the next runs[s].count rows to its entries runs[s].first.. (table-mapped rows).
  // runs has one run per table row; src holds the sum of the counts.
  virtual void paged_write(PagedCache& cache, const BlockTables& tables, const Tensor& src,
                           std::span<const CacheRun> runs) = 0;
  // t rows [to[i], to[i] + n) = rows [from[i], from[i] + n) for every i, in one pass (a forked
  // sequence's blocks); the destination ranges overlap no range of the call. Any element type.
  virtual void copy_row_runs(Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n) = 0;

  // ---- elementwise and normalization
  // Rows of `table` [V, D] for ids [N] (i32) -> [N, D]. host_ids: the same ids on the host, when
  // the caller has them (a device backend then checks them there instead of copying the ids back,
  // which waits for the device); they must equal `ids`.
  virtual Tensor embed(const WeightView& table, const Tensor& ids, std::span<const int32_t> host_ids = {}) = 0;
  // [N, D] -> [N, copies, D].
  virtual Tensor repeat_rows(const Tensor& x, int64_t copies) = 0;
  // RMS norm over the last dim; weight [last dim] or null (unweighted).
  virtual Tensor rms_norm(const Tensor& x, const WeightView* weight, float eps, NormMath math, Round out) = 0;
  virtual Tensor scale(const Tensor& x, float s, Round out) = 0;
  // a + b elementwise (same shape): the plain residual of architectures without mHC (V3).
  virtual Tensor add(const Tensor& a, const Tensor& b, Round out) = 0;
  // Columns [begin, begin + count) of every row of x [N, C] -> [N, count].
  virtual Tensor columns(const Tensor& x, int64_t begin, int64_t count) = 0;

  // ---- projections
  // y = x . w^T over the last dim of x (leading dims kept), f32 accumulation.
  virtual Tensor linear(const Tensor& x, const WeightView& w, const LinearOpts& opts) = 0;
  // {linear(x, a, opts), linear(x, b, opts)}, the same values: two projections of one input,
  // which a backend may run as one launch (the GPU's decode GEMVs).
  virtual std::pair<Tensor, Tensor> linear_pair(const Tensor& x, const WeightView& a, const WeightView& b,
                                                const LinearOpts& opts) {
    return {linear(x, a, opts), linear(x, b, opts)};
  }

  // ---- rotary embedding (MODEL-SPEC 2.4): rotates the last 2*len(inv_freq) dims of every
  // vector in interleaved pairs (x[2i], x[2i+1]) by angle pos * inv_freq[i] (f32 angle), or by
  // its negative when `inverse`. x is [N, ...] with positions [N] (i32) for its first dim.
  virtual Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) = 0;

  // rms_norm(x, weight, eps, math, out), then rope(that, positions, inv_freq, false, out), then,
  // when quant_cols > 0, quant_fp8(that, quant_cols, quant_block): the same values as the three
  // ops, which a backend may compute in one pass (the GPU: one launch for a decode step's q, kv
  // and compressed entries, instead of a norm, two copies and two kernels).
  virtual Tensor norm_rope(const Tensor& x, const WeightView* weight, float eps, NormMath math, const Tensor& positions,
                           const Tensor& inv_freq, Round out, int64_t quant_cols = 0, int64_t quant_block = 0) {
    const Tensor y = rope(rms_norm(x, weight, eps, math, out), positions, inv_freq, false, out);
    return quant_cols > 0 ? quant_fp8(y, quant_cols, quant_block) : y;
  }

  // ---- simulated quantization (MODEL-SPEC 2.2, 9): round trips of the release's formats
  // FP8 e4m3 with a ue8m0 scale per block of `block` columns over the first `cols` columns of
  // each row (the rest unchanged); a trailing partial block is quantized on its own.
  virtual Tensor quant_fp8(const Tensor& x, int64_t cols, int64_t block) = 0;
  // FP4 e2m1 with a ue8m0 scale per block of `block` over the whole last dim.
  virtual Tensor quant_fp4(const Tensor& x, int64_t block) = 0;
  // Normalized Walsh-Hadamard transform (Sylvester order, scale 1/sqrt(n)) of the last dim.
  virtual Tensor hadamard(const Tensor& x, Round out) = 0;

  // ---- manifold-constrained hyper-connections (MODEL-SPEC 3.2); X is [N, hc, D]
  virtual HcPreResult hc_pre(const Tensor& X, const HcParams& p, Round out) = 0;
  virtual Tensor hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb, Round r) = 0;
  virtual Tensor hc_head(const Tensor& X, const HcParams& p, Round out) = 0;
  // hc_pre(X, p, out), then rms_norm(y, weight, eps, math, out) of its y: the result's y is the
  // normed input of the sublayer (post and comb as hc_pre's). A backend may compute both in one
  // pass (the GPU: the mixes' second launch and the norm as one).
  virtual HcPreResult hc_pre_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps,
                                  NormMath math, Round out) {
    HcPreResult h = hc_pre(X, p, out);
    h.y = rms_norm(h.y, weight, eps, math, out);
    return h;
  }
  // hc_head(X, p, out), then rms_norm(..., weight, eps, math, out): the head's normed input. A
  // backend may compute both in one pass (the GPU, as hc_pre_norm).
  virtual Tensor hc_head_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps, NormMath math,
                              Round out) {
    return rms_norm(hc_head(X, p, out), weight, eps, math, out);
  }

  // ---- compressor (MODEL-SPEC 3.4): feeds each sequence's rows of kv and score ([N, c*d], f32,
  // score without ape) through its state; every window closed by a token (pos + 1 = multiple of
  // ratio) is pooled by a per-channel softmax over its slots. Returns the pooled entries [E, d]
  // (f32, then `out`), ordered by sequence, then window.
  virtual Tensor compress(const Tensor& kv, const Tensor& score, const Batch& b, std::span<CompressorState> states,
                          const CompressorParams& p, Round out) = 0;

  // ---- Lightning indexer (MODEL-SPEC 3.5): q [N, Hi, di], w [N, Hi], keys the paged key cache
  // (rows of di) read through `tables` (one row per sequence, in Batch order). A query at position t ranks entries e < floor((t+1)/ratio) by score (stable
  // descending: ties go to the lower index, +0 above -0) and returns the first
  // min(top_k, #valid) of them, then -1: [N, top_k] i32.
  virtual Tensor indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                              const BlockTables& tables, const IndexerParams& p) = 0;

  // ---- attention (MODEL-SPEC 3.6): q [N, H, Dh], kv [N, Dh] (this batch's rows, K = V). For a
  // query at position t of a sequence whose batch slice starts at position p, the candidates are
  //   window: positions max(0, t-W+1) .. t, read from kv for positions >= p and from the ring
  //           (rings[s] [W, Dh], slot = pos % W) for positions < p;
  //   compressed (ratio > 0): entries of sequence s in the paged cache `compressed` (through
  //           `tables`; unused when ratio is 0), either the non-negative indices in
  //           row `selected` [N, K] (i32) or, with selected == null, every e < floor((t+1)/ratio).
  // o_h = sum_j e^{s_j-M} v_j / (sum_j e^{s_j-M} + e^{sink_h-M}), s_j = scale * q_h . k_j
  // (blockwise with AttentionParams::prob_block).
  virtual Tensor sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                  const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                                  const AttentionParams& p) = 0;
  // Writes each sequence's last min(len, W) kv rows into its ring at slot pos % W.
  virtual void window_update(std::span<Tensor> rings, const Tensor& kv, const Batch& b) = 0;

  // ---- multi-head latent attention in the absorbed form (MODEL-SPEC 7): q_lat [N, H, R] is the
  // nope query absorbed into the latent space, q_pe [N, H, P] the rotated rope query; latent
  // (rows of R) and k_pe (rows of P) are the paged caches, read through `tables`, already holding
  // this batch's rows (positions 0 .. start+len-1 of each sequence). A query at position t attends to positions 0..t:
  //   s_j = scale * (q_lat_h . latent_j + q_pe_h . k_pe_j),  o_h = sum_j softmax(s)_j latent_j
  // (in f32, or with the V3 release's bf16 roundings: MlaParams).
  // Returns o [N, H, R] (f32); the caller applies each head's V projection.
  virtual Tensor mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                               const PagedCache& k_pe, const BlockTables& tables, const MlaParams& p) = 0;

  // ---- mixture of experts (MODEL-SPEC 3.8, 7): x [N, D], ids [N] (i32, hash routing)
  // scores = sqrt(softplus(gate . x)) or sigmoid(gate . x) in f32; experts = tid2eid[id] or top_k
  // of scores + bias within the kept groups (ties to the lower expert id); weights =
  // scores[experts] / sum * route_scale.
  virtual Routing route(const Tensor& x, const Tensor& ids, const RouteParams& p) = 0;
  // y = sum_k w2_e(weight_k * silu(min(w1_e x, L)) * clamp(w3_e x, -L, L)) + shared(x), summed in
  // f32 in expert-id order, then the shared expert (MoeParams: where the weight applies, bf16
  // rounding points and bf16 accumulation).
  virtual Tensor moe(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                     const SwiGluWeights& shared, const MoeParams& p) = 0;

  // ---- expert parallelism (dist/parallel.h): moe() in two parts, so that ranks holding
  // different experts compute them apart and every rank sums them in moe()'s order. Optional:
  // a backend without them refuses the call (the defaults say so); the CPU backend has both.
  // The routed terms of the (token, slot) pairs whose expert is in `owned` [first, last):
  // [M, D] f32 in (token, slot) order, each the term moe() adds for that slot (the expert's
  // output, times the routing weight with MoeParams::weight_after). Only the owned experts are read.
  virtual Tensor moe_terms(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                           std::pair<int64_t, int64_t> owned, const MoeParams& p);
  // moe() from every slot's term (terms [N * K, D] in (token, slot) order, as moe_terms gives
  // them for all experts): each token's routed sum by expert id, then slot, as moe() sums, then
  // the shared expert; bitwise moe() on the same inputs.
  virtual Tensor moe_combine(const Tensor& x, const Routing& r, const Tensor& terms, const SwiGluWeights& shared,
                             const MoeParams& p);
};

// A batch's block tables (one id list per sequence, Batch order), padded to the longest and
// uploaded once.
BlockTables make_block_tables(Backend& be, std::span<const std::vector<int32_t>> tables);

// The CPU backend (reference implementation of every op); threads <= 0: all hardware threads.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);
// The GPU backend compiled into this build: "cuda", "hip", or "" when plumb was built without one.
std::string gpu_backend_name();
// Empty when the GPU backend can start here; otherwise why not (not built in, no device, ...).
std::string gpu_unavailable_reason();
// The GPU backend on device 0; a plumb::Error saying why when it cannot start.
std::unique_ptr<Backend> make_gpu_backend();
// "cpu" -> the CPU backend; "cuda" / "hip" (or "gpu") -> the GPU backend of this build; anything
// else is a plumb::Error listing the available backends.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0);

}  // namespace plumb::backend
