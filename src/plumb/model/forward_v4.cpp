// DeepSeek-V4 forward: embedding, the mHC layer loop, MoE FFN and the head (MODEL-SPEC 3.1,
// 3.2, 3.8-3.9). Attention lives in attention_v4.cpp.
#include "plumb/model/forward_v4.h"

#include <cmath>

#include <fmt/format.h>

#include "plumb/model/batch.h"
#include "plumb/model/forward_step_v4.h"
#include "plumb/model/parallel_ops.h"
#include "plumb/model/rope_v4.h"
#include "plumb/model/tap_emit.h"
#include "plumb/util/error.h"

namespace plumb::v4 {

using backend::Round;
using backend::Tensor;

ForwardV4::ForwardV4(backend::Backend& be, const ModelConfig& cfg, const ModelWeights& weights, Numerics numerics,
                     dist::Parallel* par)
    : be_(be), cfg_(cfg), w_(weights), numerics_(numerics), pool_(be), par_(par) {
  if (cfg.arch != Arch::DeepseekV4) fail("the V4 forward needs a deepseek_v4 config, got {}", arch_name(cfg.arch));
  if (cfg.scoring_func != "sqrtsoftplus") fail("config: scoring_func '{}' is not supported (V4 uses sqrtsoftplus)", cfg.scoring_func);
  if (cfg.num_key_value_heads != 1) fail("config: V4 attention has one shared KV head, got {}", cfg.num_key_value_heads);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::vector<float> f = rope_inv_freq(cfg, l);
    inv_freq_.push_back(be.from_host(f.data(), {static_cast<int64_t>(f.size())}));
    const int64_t m = cfg.compress_ratio(l);
    compressed_cache_.push_back(m != 0 ? pool_.add(l, m, cfg.head_dim, KvPool::Kind::kEntry, cfg.qk_rope_head_dim) : -1);
    index_cache_.push_back(m == 4 ? pool_.add(l, m, cfg.index_head_dim, KvPool::Kind::kIndexKey) : -1);
  }
  pool_.set_storage(default_kv_storage(cfg.arch, numerics));
  if (splits_heads(par)) {  // heads [h0, h1) and their output groups; wo_b by output rows
    const dist::Range h = par->heads(cfg.num_attention_heads, "attention heads");
    const dist::Range g = par->heads(cfg.o_groups, "o_groups");
    const dist::Range d = par->heads(cfg.hidden_size, "hidden_size (wo_b rows)");
    local_heads_ = h.size();
    local_groups_ = g.size();
    const int64_t Dh = cfg.head_dim, R = cfg.o_lora_rank;
    for (const LayerWeights& L : weights.layers)
      heads_.push_back({row_slice(L.attn.wq_b, h.begin * Dh, h.size() * Dh), row_slice(L.attn.attn_sink, h.begin, h.size()),
                        row_slice(L.attn.wo_a, g.begin * R, g.size() * R), row_slice(L.attn.wo_b, d.begin, d.size())});
  }
}

SequenceState ForwardV4::new_sequence() const {
  SequenceState s;
  s.blocks = pool_.new_blocks();
  const int64_t Dh = cfg_.head_dim, di = cfg_.index_head_dim;
  const float neg_inf = -INFINITY;
  auto fresh = [&](int64_t slots, int64_t channels) {
    return backend::CompressorState{be_.full(backend::ElemType::F32, {slots, channels}, 0.f),
                                    be_.full(backend::ElemType::F32, {slots, channels}, neg_inf)};
  };
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    LayerState ls;
    ls.window = be_.full(backend::ElemType::F32, {cfg_.sliding_window, Dh}, 0.f);
    const int64_t m = cfg_.compress_ratio(l);
    if (m != 0) {
      const int64_t c = m == 4 ? 2 : 1;  // ratio 4 keeps the overlapping previous window
      ls.compressor = fresh(c * m, c * Dh);
      if (m == 4) ls.index_compressor = fresh(2 * m, 2 * di);
      if (const int64_t n = pool_.storage().bf16_recent; n > 0)
        ls.recent = be_.full(backend::ElemType::F32, {backend::kv_recent_ring_rows(n, m), Dh}, 0.f);
    }
    s.layers.push_back(std::move(ls));
  }
  return s;
}

void ForwardV4::tap(const Step& st, const std::string& name, const Tensor& t) const { emit_tap(be_, st.taps, name, t); }

Tensor ForwardV4::ffn(int64_t layer, const Tensor& x, Step& st) {
  const MoeWeights& m = w_.layers[layer].ffn;
  backend::RouteParams rp;
  rp.gate = &m.gate;
  rp.bias = m.gate_bias.present() ? &m.gate_bias : nullptr;
  rp.tid2eid = cfg_.is_hash_layer(layer) ? &m.tid2eid : nullptr;
  rp.host_ids = st.host_ids;
  rp.top_k = cfg_.num_experts_per_tok;
  rp.route_scale = static_cast<float>(cfg_.routed_scaling_factor);
  const backend::Routing r = be_.route(x, st.ids, rp);
  tap(st, st.prefix + "ffn.experts", r.experts);
  tap(st, st.prefix + "ffn.weights", r.weights);

  std::vector<backend::SwiGluWeights> experts;
  for (const ExpertWeights& e : m.experts) experts.push_back({&e.w1, &e.w2, &e.w3});
  backend::MoeParams mp;
  mp.swiglu_limit = static_cast<float>(cfg_.swiglu_limit);
  // The release builds its shared expert without swiglu_limit (inference/model.py: "no
  // swiglu_limit"); HF transformers clamps it. Each profile follows its own source.
  mp.clamp_shared = !st.faithful;
  mp.act_fp8 = st.faithful;
  mp.round = st.R;
  return parallel_moe(be_, par_, x, r, experts, {&m.shared.w1, &m.shared.w2, &m.shared.w3}, mp);
}

Tensor ForwardV4::forward(std::span<const SequenceStep> batch, const Taps& taps) {
  return forward(batch, all_rows(batch), taps);
}

Tensor ForwardV4::forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                          const Taps& taps) {
  BatchLayout layout = lay_out_batch(batch, cfg_);
  Step st;
  st.taps = &taps;
  st.faithful = numerics_ == Numerics::Faithful;
  st.R = st.faithful ? Round::BF16 : Round::None;
  st.batch = std::move(layout.batch);
  st.states = states_of<SequenceState>(batch, "the V4 model");
  for (const SequenceStep& s : batch) st.prefill.push_back(s.prefill);
  for (const SequenceState* s : st.states)
    if (static_cast<int64_t>(s->layers.size()) != cfg_.num_hidden_layers)
      fail("forward: sequence state has {} layers, the model {}", s->layers.size(), cfg_.num_hidden_layers);
  check_logit_rows(logit_rows, st.batch.rows);
  st.tables = pool_.prepare(batch);
  const int64_t N = st.batch.rows, hc = cfg_.hc_mult;
  st.ids = be_.from_host(layout.ids.data(), {N});
  st.host_ids = std::move(layout.ids);
  st.positions = be_.from_host(layout.positions.data(), {N});
  const float eps = static_cast<float>(cfg_.rms_norm_eps);

  // 3.1: the residual stream holds hc copies of the embedding.
  Tensor X = be_.repeat_rows(be_.embed(w_.embed, st.ids, st.host_ids), hc);
  tap(st, "embed", X);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    st.prefix = fmt::format("layer.{}.", l);
    auto site = [&](const HcWeights& h) {
      return backend::HcParams{&h.fn, &h.base, &h.scale, cfg_.hc_sinkhorn_iters, static_cast<float>(cfg_.hc_eps), eps};
    };
    backend::HcPreResult h = be_.hc_pre_norm(X, site(L.hc_attn), &L.attn_norm, eps, backend::NormMath::F32, st.R);
    Tensor x = h.y;  // the normed mix
    tap(st, st.prefix + "attn_in", x);
    Tensor a = attention(l, x, st);
    tap(st, st.prefix + "attn.out", a);
    X = be_.hc_post(a, X, h.post, h.comb, st.R);
    tap(st, st.prefix + "hc_attn", X);

    h = be_.hc_pre_norm(X, site(L.hc_ffn), &L.ffn_norm, eps, backend::NormMath::F32, st.R);
    x = h.y;
    tap(st, st.prefix + "ffn_in", x);
    Tensor f = ffn(l, x, st);
    tap(st, st.prefix + "ffn.out", f);
    X = be_.hc_post(f, X, h.post, h.comb, st.R);
    tap(st, st.prefix + "hc", X);
    X = replaced_by_tap(be_, st.taps, st.prefix + "hc", std::move(X));
  }
  advance(batch);
  if (logit_rows.empty()) return be_.full(backend::ElemType::F32, {0, cfg_.vocab_size}, 0.f);
  // The head runs only on the rows asked for: every op after the layers is row by row.
  X = gather_rows(be_, X, logit_rows);
  const backend::HcParams head_site{&w_.hc_head.fn, &w_.hc_head.base, &w_.hc_head.scale, 0,
                                    static_cast<float>(cfg_.hc_eps), eps};
  Tensor y = be_.hc_head_norm(X, head_site, &w_.norm, eps, backend::NormMath::F32, st.R);
  tap(st, "final_norm", y);
  Tensor logits = be_.linear(y, w_.head, {});  // f32 head (MODEL-SPEC 2.3)
  tap(st, "logits", logits);
  return logits;
}

}  // namespace plumb::v4
