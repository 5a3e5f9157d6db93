// Absorbed MLA == naive MLA (MODEL-SPEC 7), shown directly rather than only through the HF logits:
//  - op level: on the golden models' kv_b weights and random queries / latents / rope keys, the
//    naive per-head attention (K_h = [kv_b nope-K_h . c ; k_pe], V_h = kv_b V_h . c) equals
//    K_h^T-absorbed queries through `mla_attention` then V_h, for a prefill and for 1-token decode
//    steps reading the growing latent cache;
//  - model level: a forward whose attention is written out naively here (HF's form; it matches
//    the HF golden logits) gives the logits ForwardV3 gives in one prefill and in 1-token decode
//    steps through the absorbed cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/format/npy.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/forward_v3.h"
#include "plumb/model/weights_v3.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
using backend::Tensor;

const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden" / "v3";
const char* kConfigs[] = {"tiny-a", "tiny-b"};

struct Model {
  ModelConfig cfg;
  Checkpoint ckpt;
  v3::ModelWeights w;
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(2);
  explicit Model(const fs::path& dir)
      : cfg(load_model_config(dir.string())), ckpt(Checkpoint::open(dir.string())), w(v3::bind_weights(ckpt, cfg)) {}
  std::vector<float> host(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    be->to_host(t, v.data());
    return v;
  }
};

double rel_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - ref[i]));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return num / den;
}

// Naive causal MLA over T tokens at positions 0..T-1. q [T, H, dn+dr] (rope part rotated),
// kvb [T, H*(dn+dv)] = kv_b . c (per head: nope-K rows, then V rows), k_pe [T, dr] shared by the
// heads. Returns o [T, H*dv]. Plain f32 loops, as HF's eager attention computes it.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& kvb,
                                   const std::vector<float>& k_pe, int64_t T, int64_t H, int64_t dn, int64_t dr,
                                   int64_t dv, float scale) {
  std::vector<float> o(static_cast<std::size_t>(T * H * dv), 0.f), p(static_cast<std::size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (t * H + h) * (dn + dr);
      float mx = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        const float* kh = kvb.data() + (j * H + h) * (dn + dv);
        float dot = 0.f;
        for (int64_t d = 0; d < dn; ++d) dot += qh[d] * kh[d];
        for (int64_t d = 0; d < dr; ++d) dot += qh[dn + d] * k_pe[j * dr + d];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j <= t; ++j) sum += p[j] = std::exp(p[j] - mx);
      float* oh = o.data() + (t * H + h) * dv;
      for (int64_t j = 0; j <= t; ++j) {
        const float* vh = kvb.data() + (j * H + h) * (dn + dv) + dn;
        for (int64_t d = 0; d < dv; ++d) oh[d] += p[j] / sum * vh[d];
      }
    }
  return o;
}

// Op level. The absorption is done here with plain loops from kv_b (independently of
// ForwardV3's precomputed K^T / V), so this checks the op and the algebra together.
TEST(V3MlaNaive, AbsorbedOpEqualsNaiveAttention) {
  for (const char* name : kConfigs) {
    Model m(kGolden / name);
    const ModelConfig& c = m.cfg;
    const int64_t H = c.num_attention_heads, R = c.kv_lora_rank, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim,
                  dv = c.v_head_dim, T = 37;
    const float scale = v3::rope_v3(c).softmax_scale;
    const std::vector<float> kvb_w = decode_all(m.w.layers[1].attn.kv_b_proj);  // [H*(dn+dv), R]
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto randn = [&](int64_t n) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (float& x : v) x = nd(rng);
      return v;
    };
    const std::vector<float> q = randn(T * H * (dn + dr)), lat = randn(T * R), k_pe = randn(T * dr);
    // Naive: kvb = kv_b . c per token.
    std::vector<float> kvb(static_cast<std::size_t>(T * H * (dn + dv)), 0.f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t row = 0; row < H * (dn + dv); ++row)
        for (int64_t r = 0; r < R; ++r) kvb[t * H * (dn + dv) + row] += kvb_w[row * R + r] * lat[t * R + r];
    const std::vector<float> want = naive_attention(q, kvb, k_pe, T, H, dn, dr, dv, scale);
    // Absorbed: q_lat_h = K_h^T q_nope_h, q_pe_h, o_h = V_h (op output).
    std::vector<float> q_lat(static_cast<std::size_t>(T * H * R), 0.f), q_pe(static_cast<std::size_t>(T * H * dr));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + (t * H + h) * (dn + dr);
        for (int64_t d = 0; d < dn; ++d)
          for (int64_t r = 0; r < R; ++r) q_lat[(t * H + h) * R + r] += kvb_w[(h * (dn + dv) + d) * R + r] * qh[d];
        std::copy_n(qh + dn, dr, q_pe.data() + (t * H + h) * dr);
      }
    auto value = [&](const std::vector<float>& o_lat, int64_t n) {
      std::vector<float> o(static_cast<std::size_t>(n * H * dv), 0.f);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < dv; ++d)
            for (int64_t r = 0; r < R; ++r)
              o[(t * H + h) * dv + d] += kvb_w[(h * (dn + dv) + dn + d) * R + r] * o_lat[(t * H + h) * R + r];
      return o;
    };
    backend::Backend& be = *m.be;
    // Each cache is one block holding the whole sequence (the op's paged reads at their simplest).
    const std::vector<std::vector<int32_t>> one_block{{0}};
    const backend::BlockTables table = backend::make_block_tables(be, one_block);
    const backend::PagedCache lat_t{be.from_host(lat.data(), {T, R}), T, {}}, kpe_t{be.from_host(k_pe.data(), {T, dr}), T, {}};
    // Prefill: all T queries at once over the full caches.
    backend::Batch b;
    b.seqs.push_back({0, T, 0});
    b.rows = T;
    const Tensor o_pre = be.mla_attention(be.from_host(q_lat.data(), {T, H, R}), be.from_host(q_pe.data(), {T, H, dr}),
                                          b, lat_t, kpe_t, table, backend::MlaParams{scale});
    const double pre = rel_diff(value(m.host(o_pre), T), want);
    // Decode: query t alone, the caches holding exactly rows 0..t.
    std::vector<float> dec;
    for (int64_t t = 0; t < T; ++t) {
      backend::Batch d;
      d.seqs.push_back({0, 1, t});
      d.rows = 1;
      const backend::PagedCache lc{be.from_host(lat.data(), {t + 1, R}), t + 1, {}},
          kc{be.from_host(k_pe.data(), {t + 1, dr}), t + 1, {}};
      const Tensor o = be.mla_attention(be.from_host(q_lat.data() + t * H * R, {1, H, R}),
                                        be.from_host(q_pe.data() + t * H * dr, {1, H, dr}), d, lc, kc, table,
                                        backend::MlaParams{scale});
      const std::vector<float> ot = value(m.host(o), 1);
      dec.insert(dec.end(), ot.begin(), ot.end());
    }
    const double decode = rel_diff(dec, want);
    std::printf("[mla naive] %s op: prefill rel %.3g, decode rel %.3g\n", name, pre, decode);
    EXPECT_LE(pre, 1e-5) << name;
    EXPECT_LE(decode, 1e-5) << name;
  }
}

// A V3 forward with HF's naive attention; norms, projections, rope and the FFN use the backend's
// shared ops exactly as ForwardV3 does (those parts are checked against HF by v3_golden_test).
std::vector<float> naive_logits(Model& m, const std::vector<TokenId>& ids) {
  backend::Backend& be = *m.be;
  const ModelConfig& c = m.cfg;
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.num_attention_heads, R = c.kv_lora_rank;
  const int64_t dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const v3::RopeV3 rope = v3::rope_v3(c);
  const Tensor inv_freq = be.from_host(rope.inv_freq.data(), {dr / 2});
  std::vector<int32_t> pos(static_cast<std::size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  const Tensor positions = be.from_host(pos.data(), {T});
  const auto F32 = backend::NormMath::F32;
  const auto none = backend::Round::None;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto rotate = [&](const Tensor& t) { return be.scale(be.rope(t, positions, inv_freq, false, none), rope.rope_scale, none); };
  auto swiglu = [](const v3::MlpWeights& w) { return backend::SwiGluWeights{&w.gate_proj, &w.down_proj, &w.up_proj}; };

  const std::vector<int32_t> ids32(ids.begin(), ids.end());  // the backend's ids are i32
  Tensor h = be.embed(m.w.embed, be.from_host(ids32.data(), {T}));
  for (const v3::LayerWeights& L : m.w.layers) {
    const v3::MlaWeights& a = L.attn;
    const Tensor x = be.rms_norm(h, &L.input_layernorm, eps, F32, none);
    const Tensor q = be.linear(be.rms_norm(be.linear(x, a.q_a_proj, {}), &a.q_a_layernorm, 1e-6f, F32, none),
                               a.q_b_proj, {})
                         .reshaped({T * H, dn + dr});
    const std::vector<float> q_nope = m.host(be.columns(q, 0, dn));
    const std::vector<float> q_pe = m.host(rotate(be.columns(q, dn, dr).reshaped({T, H, dr})));
    std::vector<float> qh(static_cast<std::size_t>(T * H * (dn + dr)));
    for (int64_t i = 0; i < T * H; ++i) {
      std::copy_n(q_nope.data() + i * dn, dn, qh.data() + i * (dn + dr));
      std::copy_n(q_pe.data() + i * dr, dr, qh.data() + i * (dn + dr) + dn);
    }
    const Tensor kv = be.linear(x, a.kv_a_proj_with_mqa, {});
    const Tensor lat = be.rms_norm(be.columns(kv, 0, R), &a.kv_a_layernorm, 1e-6f, F32, none);
    const std::vector<float> o =
        naive_attention(qh, m.host(be.linear(lat, a.kv_b_proj, {})), m.host(rotate(be.columns(kv, R, dr))), T, H, dn,
                        dr, dv, rope.softmax_scale);
    h = be.add(h, be.linear(be.from_host(o.data(), {T, H * dv}), a.o_proj, {}), none);

    const Tensor y = be.rms_norm(h, &L.post_attention_layernorm, eps, F32, none);
    if (L.dense) {
      const backend::Routing no{be.full(backend::ElemType::I32, {T, 0}, 0.f), be.full(backend::ElemType::F32, {T, 0}, 0.f)};
      h = be.add(h, be.moe(y, no, {}, swiglu(L.mlp), {}), none);
    } else {
      backend::RouteParams rp;
      rp.gate = &L.moe.gate;
      rp.bias = &L.moe.bias;
      rp.top_k = c.num_experts_per_tok;
      rp.route_scale = static_cast<float>(c.routed_scaling_factor);
      rp.scoring = backend::Scoring::Sigmoid;
      rp.n_group = c.n_group;
      rp.topk_group = c.topk_group;
      std::vector<backend::SwiGluWeights> experts;
      for (const v3::MlpWeights& e : L.moe.experts) experts.push_back(swiglu(e));
      h = be.add(h, be.moe(y, be.route(y, Tensor(), rp), experts, swiglu(L.moe.shared), {}), none);
    }
  }
  return m.host(be.linear(be.rms_norm(h, &m.w.norm, eps, F32, none), m.w.lm_head, {}));
}

TEST(V3MlaNaive, ForwardEqualsNaiveForwardInPrefillAndDecode) {
  for (const char* name : kConfigs) {
    const fs::path dir = kGolden / name;
    Model m(dir);
    v3::ForwardV3 fwd(*m.be, m.cfg, m.w);
    for (int64_t L : {7, 64, 211}) {
      const std::vector<TokenId> ids = read_token_ids((dir / ("prompt_" + std::to_string(L) + ".ids.npy")).string());
      const std::vector<float> want = naive_logits(m, ids);
      // The naive forward is HF's computation: it matches the golden logits like ForwardV3 does.
      const NpyArray hf = read_npy((dir / ("prompt_" + std::to_string(L) + ".logits.npy")).string());
      std::vector<float> hf_logits(want.size());
      ASSERT_EQ(hf.data.size(), want.size() * sizeof(float));
      std::memcpy(hf_logits.data(), hf.data.data(), hf.data.size());
      EXPECT_LE(rel_diff(want, hf_logits), 1e-4) << name << " prompt_" << L;
      v3::SequenceState s = fwd.new_sequence();
      const SequenceStep in{&s, ids};
      const double pre = rel_diff(m.host(fwd.forward({&in, 1})), want);
      v3::SequenceState d = fwd.new_sequence();
      std::vector<float> dec;
      for (const TokenId& id : ids) {
        const SequenceStep step{&d, {&id, 1}};
        const std::vector<float> lg = m.host(fwd.forward({&step, 1}));
        dec.insert(dec.end(), lg.begin(), lg.end());
      }
      const double decode = rel_diff(dec, want);
      std::printf("[mla naive] %s prompt_%lld logits: absorbed prefill rel %.3g, absorbed decode rel %.3g\n", name,
                  static_cast<long long>(L), pre, decode);
      EXPECT_LE(pre, 1e-5) << name << " prompt_" << L;
      EXPECT_LE(decode, 1e-5) << name << " prompt_" << L;
    }
  }
}

}  // namespace
}  // namespace plumb
