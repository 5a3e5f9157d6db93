// DeepSeek-V3 forward: MLA in the absorbed form, dense / MoE SwiGLU FFNs, pre-norm residuals.
//
// The `faithful` profile reproduces DeepSeek-V3's released inference/model.py (deepseek-ai/
// DeepSeek-V3 @ 9b4e978, with generate.py's torch.set_default_dtype(torch.bfloat16) and the
// module defaults gemm_impl = "bf16", attn_impl = "absorb"). Its rounding points, by line of
// model.py (kernel.py for weight_dequant):
//   weights   every Linear with an FP8 weight: weight_dequant (kernel.py 83-86: e4m3 value x f32
//             block scale in f32, stored as bf16), then F.linear on bf16 (model.py 155-157);
//             bf16 Linears (head 769, gate 563) are used as bf16 -> LinearOpts::bf16_weight
//   linear    F.linear(bf16, bf16): f32 accumulation, bf16 out -> LinearOpts::out BF16
//   embed     F.embedding of the bf16 table (124): exact
//   RMSNorm   F.rms_norm(x, (dim,), weight, eps) on bf16 x and bf16 weight (294): torch's fused
//             kernel computes w * (x * rsqrt(mean(x^2) + eps)) in f32 and rounds once; eps is the
//             class default 1e-6 for every norm (278; Block 717-718, MLA 428/431, Transformer 768)
//             -> rms_norm(F32 math, Round BF16, eps 1e-6)
//   rope      apply_rotary_emb (389-393): x.float() times the complex64 freqs_cis, .to(bf16); no
//             cos/sin factor (precompute_freqs_cis 366-375) -> rope(Round BF16), rope_v3_release
//   MLA       q = wq_b(q_norm(wq_a(x))) (464); wkv_a (468); kv_norm(kv) stored in the bf16
//             kv_cache (484), k_pe in the bf16 pe_cache (485); q_nope absorbed by a bf16 einsum
//             with the bf16 wkv_b (481-483); scores = (einsum + einsum) * softmax_scale, each of
//             the three a bf16 tensor (486-487); softmax(dtype=float32).type_as(x) (490); the two
//             value einsums in bf16 (494-495); wo (496) -> MlaParams::round BF16 and bf16 linears
//   gate      linear(x, bf16 weight) -> bf16 logits; sigmoid on bf16 -> bf16 scores (576-580);
//             scores + f32 bias -> f32 selection (583); group top-2 sum / top-k on f32 (584-593);
//             weights gathered from the bf16 scores, /= bf16 sum, *= route_scale, each bf16
//             (594-598) -> RouteParams::round BF16
//   experts   w2(F.silu(w1(x)) * w3(x)) (532, 633): w1, w3, silu, the product and w2 each bf16
//             -> MoeParams::round and silu_out BF16
//   MoE       y = zeros_like(x) (bf16, 682); y[idx] += expert(x[idx]) * weights[idx, top, None]
//             in expert-id order (684-689): product and running sum rounded to bf16; shared
//             experts z (690); (y + z) bf16 (693) -> MoeParams::weight_after, accumulate BF16
//   residual  x = x + attn(...), x = x + ffn(...) on bf16 (733-734) -> add(Round BF16)
//   head      self.head is created with dtype=torch.get_default_dtype() = bf16 (769) and
//             logits = self.head(h) (793) are a bf16 tensor (no .float()) -> bf16 logits
// What the release does not define and plumb decides: logits for every position (the release
// returns the last one, 792); one softmax scale mscale (rope_v3_release); a bias-less gate when
// dim != 7168 (564) is not reproduced: plumb always applies the checkpoint's
// e_score_correction_bias, as the release does for the real model. gemm_impl "fp8" (act_quant +
// fp8_gemm, where V3.1's scale_fmt ue8m0 matters) is not the default and is not offered, so
// scale_fmt has no effect here.
#include "plumb/model/forward_v3.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plumb/model/batch.h"
#include "plumb/model/parallel_ops.h"
#include "plumb/model/rope_v4.h"
#include "plumb/model/state_copy.h"
#include "plumb/model/tap_emit.h"
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

// The unscaled RoPE frequencies 1 / theta^(2i / dim), and YaRN's ramp for frequency i (both
// HF and the release compute them this way; they differ in how the ramp is applied).
namespace {
RopeV3 unscaled_rope(const ModelConfig& c) {
  const int64_t dim = c.qk_rope_head_dim;
  if (dim <= 0 || dim % 2 != 0) fail("qk_rope_head_dim must be positive and even, got {}", dim);
  RopeV3 r;
  r.inv_freq.resize(static_cast<std::size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    r.inv_freq[i] =
        static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dim)));
  return r;
}
float yarn_ramp(const v4::YarnRange& yr, int64_t i) {
  return std::clamp(static_cast<float>((static_cast<double>(i) - yr.low) / (yr.high - yr.low)), 0.f, 1.f);
}
v4::YarnRange yarn_range_of(const ModelConfig& c, const RopeScaling& y) {
  return v4::yarn_range(c.qk_rope_head_dim, c.rope_theta, y.original_max_position_embeddings, y.beta_fast,
                        y.beta_slow);
}
}  // namespace

RopeV3 rope_v3(const ModelConfig& c) {
  RopeV3 r = unscaled_rope(c);
  const int64_t dim = c.qk_rope_head_dim;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim));
  if (c.rope_scaling && c.rope_scaling->original_max_position_embeddings > 0) {
    const RopeScaling& y = *c.rope_scaling;
    const v4::YarnRange yr = yarn_range_of(c, y);
    const float factor = static_cast<float>(y.factor);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float ramp = yarn_ramp(yr, i);
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

RopeV3 rope_v3_release(const ModelConfig& c) {
  RopeV3 r = unscaled_rope(c);  // freqs = 1 / base^(arange(0, dim, 2) / dim) (366)
  const int64_t dim = c.qk_rope_head_dim;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim));  // 434
  if (c.rope_scaling && c.rope_scaling->original_max_position_embeddings > 0) {
    const RopeScaling& y = *c.rope_scaling;
    const v4::YarnRange yr = yarn_range_of(c, y);
    const float factor = static_cast<float>(y.factor);
    // smooth = 1 - ramp; freqs / factor * (1 - smooth) + freqs * smooth (369-370): 1 - (1 - ramp)
    // is not always ramp in f32, hence not HF's formula
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float smooth = 1.f - yarn_ramp(yr, i);
      r.inv_freq[i] = r.inv_freq[i] / factor * (1.f - smooth) + r.inv_freq[i] * smooth;
    }
    const double m = 0.1 * y.mscale_all_dim * std::log(y.factor) + 1.0;  // 436-437
    scale *= m * m;
  }
  r.softmax_scale = static_cast<float>(scale);
  return r;
}

ForwardV3::ForwardV3(backend::Backend& be, const ModelConfig& cfg, const ModelWeights& weights, Numerics numerics,
                     dist::Parallel* par)
    : be_(be),
      cfg_(cfg),
      w_(weights),
      faithful_(numerics == Numerics::Faithful),
      R_(faithful_ ? backend::Round::BF16 : backend::Round::None),
      rope_(faithful_ ? rope_v3_release(cfg) : rope_v3(cfg)),
      pool_(be),
      par_(par),
      heads_(splits_heads(par) ? par->heads(cfg.num_attention_heads, "attention heads")
                               : dist::Range{0, cfg.num_attention_heads}) {
  if (cfg.arch != Arch::DeepseekV3) fail("the V3 forward needs a deepseek_v3 config, got {}", arch_name(cfg.arch));
  if (cfg.scoring_func != "sigmoid") fail("config: scoring_func '{}' is not supported (V3 uses sigmoid)", cfg.scoring_func);
  if (!cfg.norm_topk_prob) fail("config: norm_topk_prob false is not supported");
  if (faithful_) {
    // The release loads every non-Linear parameter into a bf16 tensor (embedding, norms); plumb's
    // embed and rms_norm use the stored values, which equals that only for bf16 storage.
    std::vector<const WeightView*> bf16_only = {&w_.embed, &w_.norm};
    for (const LayerWeights& L : w_.layers)
      for (const WeightView* v : {&L.input_layernorm, &L.post_attention_layernorm, &L.attn.q_a_layernorm,
                                  &L.attn.kv_a_layernorm})
        bf16_only.push_back(v);
    for (const WeightView* v : bf16_only)
      if (v->dtype != DType::BF16)
        fail("faithful numerics: '{}' is stored as {}; the release keeps it in bf16 (store it as BF16, e.g. with "
             "`plumb convert cast --to bf16`)",
             v->name, dtype_name(v->dtype));
  }
  inv_freq_ = be.from_host(rope_.inv_freq.data(), {static_cast<int64_t>(rope_.inv_freq.size())});
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    latent_cache_.push_back(pool_.add(l, 1, cfg.kv_lora_rank, KvPool::Kind::kLatent));
    k_pe_cache_.push_back(pool_.add(l, 1, cfg.qk_rope_head_dim, KvPool::Kind::kRopeKey));
  }
  pool_.set_storage(default_kv_storage(cfg.arch, numerics));
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
    a.k_t_heads = row_slice(a.k_t_view, heads_.begin * R, heads_.size() * R);
    a.v_heads = row_slice(a.v_view, heads_.begin * dv, heads_.size() * dv);
  }
}

SequenceState copy_state(backend::Backend&, const SequenceState& s) {
  SequenceState out;  // V3 keeps no fixed state: its caches are all paged
  out.pos = s.pos;
  return out;
}

SequenceState ForwardV3::new_sequence() const {
  SequenceState s;
  s.blocks = pool_.new_blocks();
  return s;
}

Tensor ForwardV3::attention(int64_t l, const Tensor& x, const backend::Batch& b, const Tensor& positions,
                            const backend::BlockTables& tables) {
  const MlaWeights& a = w_.layers[l].attn;
  const Absorbed& ab = absorbed_[l];
  // --tp: this rank's heads; q_b_proj stays whole (its FP8 blocks need not fall on head
  // boundaries), the absorbed per-head projections and the attention run on the rank's heads and
  // their outputs are gathered before o_proj.
  const int64_t N = x.rows(), H = heads_.size(), R = cfg_.kv_lora_rank;
  const int64_t dn = cfg_.qk_nope_head_dim, dr = cfg_.qk_rope_head_dim;
  // HF builds q_a_layernorm and kv_a_layernorm with its class default eps, not rms_norm_eps (the
  // release uses its RMSNorm default 1e-6 too).
  const float eps = 1e-6f;
  const auto F32 = backend::NormMath::F32;
  const auto R16 = R_;  // None (reference) or BF16 (faithful)
  const backend::LinearOpts lin{.out = R16, .bf16_weight = faithful_};  // {} in reference

  Tensor q = be_.linear(be_.rms_norm(be_.linear(x, a.q_a_proj, lin), &a.q_a_layernorm, eps, F32, R16), a.q_b_proj, lin);
  if (H != cfg_.num_attention_heads) q = be_.columns(q, heads_.begin * (dn + dr), H * (dn + dr));
  q = q.reshaped({N * H, dn + dr});
  // HF multiplies cos and sin by the YaRN attention factor, i.e. scales the rotated vectors (the
  // release does not: rope_v3_release has rope_scale 1).
  auto rotate = [&](const Tensor& t) {
    const Tensor r = be_.rope(t, positions, inv_freq_, false, R16);
    return rope_.rope_scale == 1.f ? r : be_.scale(r, rope_.rope_scale, R16);
  };
  const Tensor q_pe = rotate(be_.columns(q, dn, dr).reshaped({N, H, dr}));
  const Tensor q_lat = be_.linear(be_.columns(q, 0, dn).reshaped({N, H * dn}), ab.k_t_heads,
                                  {.groups = H, .out = R16, .bf16_weight = faithful_});

  const Tensor kv = be_.linear(x, a.kv_a_proj_with_mqa, lin);
  const Tensor lat = be_.rms_norm(be_.columns(kv, 0, R), &a.kv_a_layernorm, eps, F32, R16);
  const Tensor k_pe = rotate(be_.columns(kv, R, dr));
  std::vector<backend::CacheRun> runs;  // each sequence's new positions, in batch order
  for (const backend::SeqSlice& s : b.seqs) runs.push_back({s.start, s.len});
  backend::PagedCache& lat_c = pool_.cache(latent_cache_[l]);
  backend::PagedCache& kpe_c = pool_.cache(k_pe_cache_[l]);
  be_.paged_write(lat_c, tables, lat, runs);
  be_.paged_write(kpe_c, tables, k_pe, runs);
  const Tensor o_lat = be_.mla_attention(q_lat.reshaped({N, H, R}), q_pe, b, lat_c, kpe_c, tables,
                                         backend::MlaParams{rope_.softmax_scale, R16});
  const Tensor o = gather_heads(
      be_, par_, be_.linear(o_lat.reshaped({N, H * R}), ab.v_heads, {.groups = H, .out = R16, .bf16_weight = faithful_}));
  return be_.linear(o, a.o_proj, lin);
}

Tensor ForwardV3::ffn(int64_t l, const Tensor& x) {
  const LayerWeights& L = w_.layers[l];
  auto swiglu = [](const MlpWeights& m) { return backend::SwiGluWeights{&m.gate_proj, &m.down_proj, &m.up_proj}; };
  backend::MoeParams mp;  // {} in reference
  if (faithful_) {        // the release's bf16 Expert / MLP / MoE (see the list at the top)
    mp.round = backend::Round::BF16;
    mp.bf16_weight = true;
    mp.silu_out = backend::Round::BF16;
    mp.weight_after = true;
    mp.accumulate = backend::Round::BF16;
  }
  if (L.dense) {  // a dense layer is the moe op with no routed experts and the MLP as "shared"
    const backend::Routing none{be_.full(backend::ElemType::I32, {x.rows(), 0}, 0.f),
                                be_.full(backend::ElemType::F32, {x.rows(), 0}, 0.f)};
    return be_.moe(x, none, {}, swiglu(L.mlp), mp);
  }
  backend::RouteParams rp;
  rp.gate = &L.moe.gate;
  rp.bias = &L.moe.bias;
  rp.top_k = cfg_.num_experts_per_tok;
  rp.route_scale = static_cast<float>(cfg_.routed_scaling_factor);
  rp.scoring = backend::Scoring::Sigmoid;
  rp.n_group = cfg_.n_group;
  rp.topk_group = cfg_.topk_group;
  rp.round = R_;
  const Tensor no_ids;  // hash routing is V4-only
  const backend::Routing r = be_.route(x, no_ids, rp);
  std::vector<backend::SwiGluWeights> experts;
  for (const MlpWeights& e : L.moe.experts) experts.push_back(swiglu(e));
  return parallel_moe(be_, par_, x, r, experts, swiglu(L.moe.shared), mp);
}

Tensor ForwardV3::forward(std::span<const SequenceStep> batch, const Taps& taps) {
  return forward(batch, all_rows(batch), taps);
}

Tensor ForwardV3::forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                          const Taps& taps) {
  const BatchLayout layout = lay_out_batch(batch, cfg_);
  const backend::Batch& b = layout.batch;
  states_of<SequenceState>(batch, "the V3 model");  // refuses a state another model made
  check_logit_rows(logit_rows, b.rows);
  const backend::BlockTables tables = pool_.prepare(batch);
  const Tensor tok = be_.from_host(layout.ids.data(), {b.rows});
  const Tensor positions = be_.from_host(layout.positions.data(), {b.rows});
  // The release's RMSNorm ignores the config's rms_norm_eps: every norm has the default 1e-6.
  const float eps = faithful_ ? 1e-6f : static_cast<float>(cfg_.rms_norm_eps);
  const auto F32 = backend::NormMath::F32;
  const auto R16 = R_;

  const Taps* tp = taps.any() ? &taps : nullptr;
  Tensor h = be_.embed(w_.embed, tok, layout.ids);
  emit_tap(be_, tp, "embed", h);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const std::string prefix = fmt::format("layer.{}.", l);
    Tensor x = be_.rms_norm(h, &L.input_layernorm, eps, F32, R16);
    emit_tap(be_, tp, prefix + "attn_in", x);
    Tensor a = attention(l, x, b, positions, tables);
    emit_tap(be_, tp, prefix + "attn.out", a);
    h = be_.add(h, a, R16);
    x = be_.rms_norm(h, &L.post_attention_layernorm, eps, F32, R16);
    emit_tap(be_, tp, prefix + "ffn_in", x);
    Tensor f = ffn(l, x);
    emit_tap(be_, tp, prefix + "ffn.out", f);
    h = be_.add(h, f, R16);
    emit_tap(be_, tp, prefix + "residual", h);
    h = replaced_by_tap(be_, tp, prefix + "residual", std::move(h));
  }
  advance(batch);
  if (logit_rows.empty()) return be_.full(backend::ElemType::F32, {0, cfg_.vocab_size}, 0.f);
  // The head runs only on the rows asked for: the final norm and the head are row by row.
  const Tensor y = be_.rms_norm(gather_rows(be_, h, logit_rows), &w_.norm, eps, F32, R16);
  emit_tap(be_, tp, "final_norm", y);
  // faithful: the release's head is a bf16 Linear and its logits a bf16 tensor.
  const Tensor logits = be_.linear(y, w_.lm_head, {.out = R16, .bf16_weight = faithful_});
  emit_tap(be_, tp, "logits", logits);
  return logits;
}

}  // namespace plumb::v3
