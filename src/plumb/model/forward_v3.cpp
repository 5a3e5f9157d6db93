// DeepSeek-V3 forward: MLA in the absorbed form, dense / MoE SwiGLU FFNs, pre-norm residuals.
#include "plumb/model/forward_v3.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plumb/model/rope_v4.h"
#include "plumb/model/tap_emit.h"
#include "plumb/model/state_v4.h"
#include "plumb/util/error.h"

namespace plumb::v3 {

using backend::Tensor;

namespace {

double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

WeightView f32_view(const std::string& name, const std::vector<float>& data, int64_t rows, int64_t cols) {
  WeightView w;
  w.name = name;
  w.format = WeightFormat::Dense;
  w.dtype = DType::F32;
  w.shape = {rows, cols};
  w.data = reinterpret_cast<const std::byte*>(data.data());
  return w;
}

}  // namespace

RopeV3 rope_v3(const ModelConfig& c) {
  const int64_t dim = c.qk_rope_head_dim;
  if (dim <= 0 || dim % 2 != 0) fail("qk_rope_head_dim must be positive and even, got {}", dim);
  RopeV3 r;
  r.inv_freq.resize(static_cast<std::size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    r.inv_freq[i] = static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dim)));
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim));
  if (c.rope_scaling && c.rope_scaling->original_max_position_embeddings > 0) {
    const RopeScaling& y = *c.rope_scaling;
    const v4::YarnRange yr = v4::yarn_range(dim, c.rope_theta, y.original_max_position_embeddings, y.beta_fast, y.beta_slow);
    const float factor = static_cast<float>(y.factor);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - yr.low) / (yr.high - yr.low)), 0.f, 1.f);
      r.inv_freq[i] = r.inv_freq[i] / factor * ramp + r.inv_freq[i] * (1.f - ramp);
    }
    // HF: the attention factor is the ratio when both mscales are set, else mscale(f, 1); the
    // softmax scale takes mscale(f, mscale_all_dim)^2 only when mscale_all_dim is non-zero.
    r.rope_scale = static_cast<float>(y.mscale != 0 && y.mscale_all_dim != 0
                                          ? yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim)
                                          : yarn_mscale(y.factor, 1.0));
    if (y.mscale_all_dim != 0) scale *= std::pow(yarn_mscale(y.factor, y.mscale_all_dim), 2);
  }
  r.softmax_scale = static_cast<float>(scale);
  return r;
}

ForwardV3::ForwardV3(backend::Backend& be, const ModelConfig& cfg, const ModelWeights& weights)
    : be_(be), cfg_(cfg), w_(weights), rope_(rope_v3(cfg)) {
  if (cfg.arch != Arch::DeepseekV3) fail("the V3 forward needs a deepseek_v3 config, got {}", arch_name(cfg.arch));
  if (cfg.scoring_func != "sigmoid") fail("config: scoring_func '{}' is not supported (V3 uses sigmoid)", cfg.scoring_func);
  if (!cfg.norm_topk_prob) fail("config: norm_topk_prob false is not supported");
  inv_freq_ = be.from_host(rope_.inv_freq.data(), {static_cast<int64_t>(rope_.inv_freq.size())});
  // Absorption (MODEL-SPEC 7): score_h = q_nope_h . K_h c = (K_h^T q_nope_h) . c, and the
  // output V_h (sum_j p_j c_j); K_h and V_h are head h's rows of kv_b [H*(nope+v), R].
  const int64_t H = cfg.num_attention_heads, R = cfg.kv_lora_rank, dn = cfg.qk_nope_head_dim, dv = cfg.v_head_dim;
  absorbed_.resize(w_.layers.size());
  for (std::size_t l = 0; l < w_.layers.size(); ++l) {
    const std::vector<float> kvb = decode_all(w_.layers[l].attn.kv_b_proj);
    Absorbed& a = absorbed_[l];
    a.k_t.resize(static_cast<std::size_t>(H * R * dn));
    a.v.resize(static_cast<std::size_t>(H * dv * R));
    for (int64_t h = 0; h < H; ++h) {
      const float* kh = kvb.data() + h * (dn + dv) * R;
      for (int64_t d = 0; d < dn; ++d)
        for (int64_t r = 0; r < R; ++r) a.k_t[(h * R + r) * dn + d] = kh[d * R + r];
      std::copy_n(kh + dn * R, dv * R, a.v.data() + h * dv * R);
    }
    a.k_t_view = f32_view("absorbed K^T", a.k_t, H * R, dn);
    a.v_view = f32_view("absorbed V", a.v, H * dv, R);
  }
}

SequenceState ForwardV3::new_sequence() const {
  SequenceState s;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    s.latent.push_back(be_.full(backend::ElemType::F32, {0, cfg_.kv_lora_rank}, 0.f));
    s.k_pe.push_back(be_.full(backend::ElemType::F32, {0, cfg_.qk_rope_head_dim}, 0.f));
  }
  return s;
}

Tensor ForwardV3::attention(int64_t l, const Tensor& x, const backend::Batch& b, const Tensor& positions,
                            std::span<SequenceState* const> states) {
  const MlaWeights& a = w_.layers[l].attn;
  const Absorbed& ab = absorbed_[l];
  const int64_t N = x.rows(), H = cfg_.num_attention_heads, R = cfg_.kv_lora_rank;
  const int64_t dn = cfg_.qk_nope_head_dim, dr = cfg_.qk_rope_head_dim;
  // HF builds q_a_layernorm and kv_a_layernorm with its class default eps, not rms_norm_eps.
  const float eps = 1e-6f;
  const auto F32 = backend::NormMath::F32;
  const auto none = backend::Round::None;

  Tensor q = be_.linear(be_.rms_norm(be_.linear(x, a.q_a_proj, {}), &a.q_a_layernorm, eps, F32, none), a.q_b_proj, {});
  q = q.reshaped({N * H, dn + dr});
  // HF multiplies cos and sin by the YaRN attention factor, i.e. scales the rotated vectors.
  auto rotate = [&](const Tensor& t) {
    const Tensor r = be_.rope(t, positions, inv_freq_, false, none);
    return rope_.rope_scale == 1.f ? r : be_.scale(r, rope_.rope_scale, none);
  };
  const Tensor q_pe = rotate(be_.columns(q, dn, dr).reshaped({N, H, dr}));
  const Tensor q_lat = be_.linear(be_.columns(q, 0, dn).reshaped({N, H * dn}), ab.k_t_view, {.groups = H});

  const Tensor kv = be_.linear(x, a.kv_a_proj_with_mqa, {});
  const Tensor lat = be_.rms_norm(be_.columns(kv, 0, R), &a.kv_a_layernorm, eps, F32, none);
  const Tensor k_pe = rotate(be_.columns(kv, R, dr));
  std::vector<Tensor> lat_c, kpe_c;
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    const backend::SeqSlice& s = b.seqs[i];
    SequenceState& st = *states[i];
    v4::ensure_capacity(be_, st.latent[l], s.start + s.len, s.start);
    v4::ensure_capacity(be_, st.k_pe[l], s.start + s.len, s.start);
    be_.copy_rows(st.latent[l], s.start, lat, s.row, s.len);
    be_.copy_rows(st.k_pe[l], s.start, k_pe, s.row, s.len);
    lat_c.push_back(st.latent[l]);
    kpe_c.push_back(st.k_pe[l]);
  }
  const Tensor o_lat = be_.mla_attention(q_lat.reshaped({N, H, R}), q_pe, b, lat_c, kpe_c, rope_.softmax_scale);
  const Tensor o = be_.linear(o_lat.reshaped({N, H * R}), ab.v_view, {.groups = H});
  return be_.linear(o, a.o_proj, {});
}

Tensor ForwardV3::ffn(int64_t l, const Tensor& x) {
  const LayerWeights& L = w_.layers[l];
  auto swiglu = [](const MlpWeights& m) { return backend::SwiGluWeights{&m.gate_proj, &m.down_proj, &m.up_proj}; };
  if (L.dense) {  // a dense layer is the moe op with no routed experts and the MLP as "shared"
    const backend::Routing none{be_.full(backend::ElemType::I32, {x.rows(), 0}, 0.f),
                                be_.full(backend::ElemType::F32, {x.rows(), 0}, 0.f)};
    return be_.moe(x, none, {}, swiglu(L.mlp), {});
  }
  backend::RouteParams rp;
  rp.gate = &L.moe.gate;
  rp.bias = &L.moe.bias;
  rp.top_k = cfg_.num_experts_per_tok;
  rp.route_scale = static_cast<float>(cfg_.routed_scaling_factor);
  rp.scoring = backend::Scoring::Sigmoid;
  rp.n_group = cfg_.n_group;
  rp.topk_group = cfg_.topk_group;
  const Tensor no_ids;  // hash routing is V4-only
  const backend::Routing r = be_.route(x, no_ids, rp);
  std::vector<backend::SwiGluWeights> experts;
  for (const MlpWeights& e : L.moe.experts) experts.push_back(swiglu(e));
  return be_.moe(x, r, experts, swiglu(L.moe.shared), {});
}

Tensor ForwardV3::forward(std::span<const SequenceInput> batch, const Taps& taps) {
  if (batch.empty()) fail("forward: empty batch");
  backend::Batch b;
  std::vector<SequenceState*> states;
  std::vector<int32_t> ids, pos;
  for (const SequenceInput& in : batch) {
    if (!in.state) fail("forward: sequence without state");
    if (std::find(states.begin(), states.end(), in.state) != states.end())
      fail("forward: the same sequence state appears twice in one batch");
    if (in.tokens.empty()) fail("forward: a sequence has no new tokens");
    if (static_cast<int64_t>(in.state->latent.size()) != cfg_.num_hidden_layers)
      fail("forward: sequence state has {} layers, the model {}", in.state->latent.size(), cfg_.num_hidden_layers);
    for (int32_t id : in.tokens)
      if (id < 0 || id >= cfg_.vocab_size) fail("token id {} is outside the vocabulary [0, {})", id, cfg_.vocab_size);
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    b.seqs.push_back({b.rows, n, in.state->pos});
    b.rows += n;
    states.push_back(in.state);
    ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(in.state->pos + i));
  }
  const Tensor tok = be_.from_host(ids.data(), {b.rows});
  const Tensor positions = be_.from_host(pos.data(), {b.rows});
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const auto F32 = backend::NormMath::F32;
  const auto none = backend::Round::None;

  const Taps* tp = taps.enabled() || taps.marking() ? &taps : nullptr;
  Tensor h = be_.embed(w_.embed, tok);
  emit_tap(be_, tp, "embed", h);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const std::string prefix = fmt::format("layer.{}.", l);
    Tensor x = be_.rms_norm(h, &L.input_layernorm, eps, F32, none);
    emit_tap(be_, tp, prefix + "attn_in", x);
    Tensor a = attention(l, x, b, positions, states);
    emit_tap(be_, tp, prefix + "attn.out", a);
    h = be_.add(h, a, none);
    x = be_.rms_norm(h, &L.post_attention_layernorm, eps, F32, none);
    emit_tap(be_, tp, prefix + "ffn_in", x);
    Tensor f = ffn(l, x);
    emit_tap(be_, tp, prefix + "ffn.out", f);
    h = be_.add(h, f, none);
    emit_tap(be_, tp, prefix + "residual", h);
  }
  const Tensor y = be_.rms_norm(h, &w_.norm, eps, F32, none);
  emit_tap(be_, tp, "final_norm", y);
  const Tensor logits = be_.linear(y, w_.lm_head, {});
  emit_tap(be_, tp, "logits", logits);
  for (std::size_t i = 0; i < states.size(); ++i) states[i]->pos += b.seqs[i].len;
  return logits;
}

}  // namespace plumb::v3
