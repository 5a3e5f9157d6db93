// DeepSeek-V4 attention (MODEL-SPEC 3.3-3.7): q/kv projections, the KV compressor, the Lightning
// indexer, sparse attention with sink, inverse RoPE and the grouped output projection.
#include <cmath>
#include <optional>
#include <tuple>

#include "plumb/model/forward_step_v4.h"
#include "plumb/model/parallel_ops.h"
#include "plumb/util/error.h"

namespace plumb::v4 {

using backend::NormMath;
using backend::Round;
using backend::Tensor;

namespace {
std::vector<Tensor> windows(const std::vector<SequenceState*>& states, int64_t layer) {
  std::vector<Tensor> r;
  for (SequenceState* s : states) r.push_back(s->layers[layer].window);
  return r;
}
}  // namespace

// Feeds the batch through the layer's main (or indexer) compressor and appends the entries it
// closes to each sequence's cache: pooled -> bf16 (faithful) -> norm -> RoPE at position w*m ->
// FP8 nope round trip (main) or Hadamard + FP4 round trip (indexer, faithful only).
Tensor ForwardV4::compress(int64_t layer, const Tensor& x, Step& st, bool indexer) {
  const AttentionWeights& aw = w_.layers[layer].attn;
  const CompressorWeights& cw = indexer ? aw.indexer->compressor : *aw.compressor;
  const int64_t m = cfg_.compress_ratio(layer), d = indexer ? cfg_.index_head_dim : cfg_.head_dim;
  const int64_t rd = cfg_.qk_rope_head_dim;
  // The compressor projections run in f32 on the (bf16) input in both profiles.
  const Tensor a = be_.linear(x, cw.wkv, {});
  const Tensor z = be_.linear(x, cw.wgate, {});
  std::vector<backend::CompressorState> cs;
  for (SequenceState* s : st.states) cs.push_back(indexer ? s->layers[layer].index_compressor : s->layers[layer].compressor);
  Tensor e = be_.compress(a, z, st.batch, cs, {m, d, &cw.ape}, st.R);
  if (e.rows() == 0) return e;
  // Each stage of the new entries (tools/golden/compare_step17.py compares them with the release's)
  const std::string what = st.prefix + (indexer ? "attn.index_keys" : "attn.compressed");
  tap(st, what + ".pooled", e);

  std::vector<int32_t> pos;  // entry w sits at the position of its window's first token
  for (const auto& s : st.batch.seqs)
    for (int64_t w = s.start / m; w < (s.start + s.len) / m; ++w) pos.push_back(static_cast<int32_t>(w * m));
  const Tensor positions = be_.from_host(pos.data(), {e.rows()});
  e = norm_rope(e, &cw.norm, NormMath::F32, positions, inv_freq_[layer], st.faithful && !indexer ? d - rd : 0, st,
                what, true);
  if (st.faithful && indexer) e = be_.quant_fp4(be_.hadamard(e, st.R), 32);
  tap(st, what, e);

  std::vector<backend::CacheRun> runs;  // each sequence's new entries, in e's order
  for (const auto& s : st.batch.seqs) runs.push_back({s.start / m, (s.start + s.len) / m - s.start / m});
  be_.paged_write(pool_.cache(indexer ? index_cache_[layer] : compressed_cache_[layer]), st.tables, e, runs);
  return e;
}

// The Lightning indexer's head weights of x (MODEL-SPEC 3.5), with the scales each profile folds
// into them (the release: both, into the bf16 weights; HF: Hi^-0.5 here, di^-0.5 after the relu).
Tensor ForwardV4::indexer_weights(int64_t layer, const Tensor& x, Step& st) {
  const IndexerWeights& iw = *w_.layers[layer].attn.indexer;
  const auto Hi = static_cast<double>(cfg_.index_n_heads), di = static_cast<double>(cfg_.index_head_dim);
  const Tensor w = be_.linear(x, iw.weights_proj, {1, false, st.R});
  return be_.scale(w, static_cast<float>(st.faithful ? std::pow(di, -0.5) * std::pow(Hi, -0.5) : std::pow(Hi, -0.5)),
                   st.R);
}

// Lightning indexer (MODEL-SPEC 3.5): top-k compressed entries per query, -1 where unused, after
// this step's keys are in the cache (compress(.., true): an entry closed by this token can be
// selected). q_proj: the indexer's wq_b of the attention's q latent (attention() runs it beside
// its own wq_b); w: indexer_weights().
Tensor ForwardV4::indexer_select(int64_t layer, const Tensor& q_proj, const Tensor& w, Step& st) {
  const int64_t N = st.batch.rows, Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
  Tensor q = q_proj.reshaped({N, Hi, di});
  q = be_.rope(q, st.positions, inv_freq_[layer], false, st.R);
  if (st.faithful) q = be_.quant_fp4(be_.hadamard(q, st.R), 32);
  backend::IndexerParams p;
  p.ratio = cfg_.compress_ratio(layer);
  p.top_k = cfg_.index_topk;
  p.round = st.R;
  p.relu_scale = st.faithful ? 1.f : static_cast<float>(std::pow(static_cast<double>(di), -0.5));
  tap(st, st.prefix + "attn.index_q", q);  // what the scores use: after RoPE (and faithful: Hadamard, FP4)
  tap(st, st.prefix + "attn.index_w", w);  // the heads' weights, scales folded in as the scores use them
  Tensor sel = be_.indexer_topk(q, w, st.batch, pool_.cache(index_cache_[layer]), st.tables, p);
  tap(st, st.prefix + "attn.index_topk", sel);
  return sel;
}

Tensor ForwardV4::norm_rope(const Tensor& x, const WeightView* weight, NormMath math, const Tensor& positions,
                           const Tensor& inv_freq, int64_t quant_cols, Step& st, const std::string& stage,
                           bool tap_roped) {
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (st.taps && st.taps->enabled()) {  // the stages for their taps; the result is the one op's below
    const Tensor normed = be_.rms_norm(x, weight, eps, math, st.R);
    tap(st, stage + ".normed", normed);
    if (tap_roped) tap(st, stage + ".roped", be_.rope(normed, positions, inv_freq, false, st.R));
  }
  return be_.norm_rope(x, weight, eps, math, positions, inv_freq, st.R, quant_cols, 64);
}

Tensor ForwardV4::attention(int64_t layer, const Tensor& x, Step& st) {
  const AttentionWeights& aw = w_.layers[layer].attn;
  const int64_t N = st.batch.rows, Dh = cfg_.head_dim, rd = cfg_.qk_rope_head_dim;
  // --tp: this rank's heads (and their output groups); each output element is computed on one
  // rank and all-gathered, never summed across ranks (dist/parallel.h).
  const bool split = !heads_.empty();
  const int64_t H = split ? local_heads_ : cfg_.num_attention_heads, G = split ? local_groups_ : cfg_.o_groups;
  const WeightView& wq_b = split ? heads_[layer].wq_b : aw.wq_b;
  const WeightView& sink = split ? heads_[layer].attn_sink : aw.attn_sink;
  const int64_t m = cfg_.compress_ratio(layer);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const backend::LinearOpts fp8{1, st.faithful, st.R};  // FP8 weights: act-quant in faithful
  const Tensor& freq = inv_freq_[layer];

  // 3.4-3.5 first, as a side chain (Backend::side_begin): the compressors read only x and their
  // own states and write only their caches, which nothing reads before the join below; so do the
  // indexer's head weights. A device backend runs them beside the q and kv path. (The indexer's
  // keys go in before its top-k: an entry closed by this token can be selected.)
  Tensor entries, index_w;
  std::optional<backend::SideChain> side;
  if (m != 0) {
    side.emplace(be_, N);
    entries = compress(layer, x, st, false);
    if (m == 4) {
      compress(layer, x, st, true);
      index_w = indexer_weights(layer, x, st);
    }
    side->end();
  }

  // 3.3: low-rank q with a per-head unweighted RMS norm; one shared kv head (K = V).
  // Every stage is tapped (tools/golden/compare_step17.py --attn0 compares each with the
  // release's): q_a / kv_a the projections, then the norms, RoPE and the FP8 round trip.
  // wq_a and wkv read the same x (one launch where the backend can: linear_pair).
  const auto [qa, kv_a] = be_.linear_pair(x, aw.wq_a, aw.wkv, fp8);
  tap(st, st.prefix + "attn.q_a", qa);
  const Tensor qr = be_.rms_norm(qa, &aw.q_norm, eps, NormMath::F32, st.R);
  tap(st, st.prefix + "attn.qr", qr);
  // In CSA layers the indexer's wq_b reads the same qr with the same options: one launch where
  // the backend can (linear_pair), its result for indexer_select.
  Tensor q, index_q;
  if (m == 4)
    std::tie(q, index_q) = be_.linear_pair(qr, wq_b, aw.indexer->wq_b, fp8);
  else
    q = be_.linear(qr, wq_b, fp8);
  q = q.reshaped({N, H, Dh});
  tap(st, st.prefix + "attn.q_b", q);
  q = norm_rope(q, nullptr, st.faithful ? NormMath::BF16Steps : NormMath::F32, st.positions, freq, 0, st,
                st.prefix + "attn.q", false);
  tap(st, st.prefix + "attn.kv_a", kv_a);
  // The rope dims stay bf16; the others take the FP8 round trip in faithful.
  const Tensor kv = norm_rope(kv_a, &aw.kv_norm, NormMath::F32, st.positions, freq, st.faithful ? Dh - rd : 0, st,
                              st.prefix + "attn.kv", true);
  tap(st, st.prefix + "attn.q", q);
  tap(st, st.prefix + "attn.kv", kv);

  // 3.5: for ratio 4, the indexer's choice among the compressed entries.
  if (side) side->join();
  Tensor selected;
  if (m == 4) selected = indexer_select(layer, index_q, index_w, st);
  const backend::PagedCache none;  // SWA layers read no compressed entries
  const backend::PagedCache& compressed = m != 0 ? pool_.cache(compressed_cache_[layer]) : none;

  // 3.6: sparse attention with sink, then the window ring takes this batch's kv.
  std::vector<Tensor> rings = windows(st.states, layer);
  backend::AttentionParams ap;
  ap.window = cfg_.sliding_window;
  ap.ratio = m;
  ap.sink = &sink;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  ap.bf16_probs = st.faithful;
  ap.prob_block = st.faithful ? 64 : 0;  // the release kernel's online softmax blocks (kernel.py 290)
  ap.prefill = st.prefill;
  ap.out = st.R;
  // --kv-bf16-recent: the recent entries in bf16, from this step's new ones and each ring.
  backend::RecentEntries recent;
  std::vector<Tensor> recent_rings;
  backend::Batch new_entries;  // the rows of `recent.fresh`, by sequence, at their entry numbers
  if (m != 0 && pool_.storage().bf16_recent > 0) {
    recent.positions = pool_.storage().bf16_recent;
    for (SequenceState* s : st.states) recent_rings.push_back(s->layers[layer].recent);
    recent.rings = recent_rings;
    if (entries.rows() > 0) recent.fresh = be_.scale(entries, 1.f, Round::BF16);
    for (const auto& s : st.batch.seqs) {
      const int64_t n = (s.start + s.len) / m - s.start / m;
      recent.fresh_row.push_back(new_entries.rows);
      new_entries.seqs.push_back({new_entries.rows, n, s.start / m});
      new_entries.rows += n;
    }
    ap.recent = &recent;
  }
  Tensor o = be_.sparse_attention(q, kv, st.batch, rings, compressed, st.tables, selected.defined() ? &selected : nullptr,
                                  ap);
  tap(st, st.prefix + "attn.o.raw", o);  // the sparse attention's output, before the inverse RoPE
  be_.window_update(rings, kv, st.batch);
  if (ap.recent && new_entries.rows > 0) be_.window_update(recent_rings, recent.fresh, new_entries);

  // 3.7: undo the rope carried by V, then the grouped low-rank output projection (wo_a runs as
  // a bf16 weight without act-quant in the release).
  o = be_.rope(o, st.positions, freq, true, st.R);
  tap(st, st.prefix + "attn.o", o);
  // With --tp: this rank's groups of wo_a, gathered, then its rows of wo_b, gathered.
  const WeightView& wo_a = split ? heads_[layer].wo_a : aw.wo_a;
  const WeightView& wo_b = split ? heads_[layer].wo_b : aw.wo_b;
  const Tensor u = gather_heads(be_, par_, be_.linear(o.reshaped({N, H * Dh}), wo_a, {G, false, st.R}));
  tap(st, st.prefix + "attn.wo_a", u);
  return gather_heads(be_, par_, be_.linear(u, wo_b, fp8));
}

}  // namespace plumb::v4
