// CPU ops added for DeepSeek-V3 against naive loops: sigmoid routing with group-limited top-k,
// absorbed MLA attention over ragged batches, column slices and the residual add; and the bf16
// options of the V3 `faithful` profile (the release's rounding points, forward_v3.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "op_test_util.h"
#include "paged_util.h"
#include "plumb/backend/backend.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Tensor;

using CpuV3Ops = CpuOpTest<11>;

// V3's gate: sigmoid scores, group-limited top-k, route scale 2.5.
backend::RouteParams v3_route(const WeightView& gate, const WeightView& bias, int64_t K, int64_t G, int64_t TG,
                              backend::Round round) {
  backend::RouteParams rp;
  rp.gate = &gate;
  rp.bias = &bias;
  rp.top_k = K;
  rp.route_scale = 2.5f;
  rp.scoring = backend::Scoring::Sigmoid;
  rp.n_group = G;
  rp.topk_group = TG;
  rp.round = round;
  return rp;
}

TEST_F(CpuV3Ops, GroupLimitedSigmoidRouting) {
  const int64_t N = 40, D = 24, E = 16, G = 4, TG = 2, K = 4, per = E / G;
  const std::vector<float> x = randn(rng, N * D), gw = randn(rng, E * D, 0.3f), bias = randn(rng, E, 0.2f);
  const OwnedWeight gate = f32_weight({E, D}, gw), b = f32_weight({E}, bias);
  const WeightView gv = gate.view(), bv = b.view();
  const backend::RouteParams rp = v3_route(gv, bv, K, G, TG, backend::Round::None);
  const backend::Routing r = be->route(upload(x, {N, D}), Tensor(), rp);
  std::vector<int32_t> ex(N * K);
  std::vector<float> wt(N * K);
  be->to_host(r.experts, ex.data());
  be->to_host(r.weights, wt.data());
  for (int64_t n = 0; n < N; ++n) {
    // Naive: biased scores, group score = sum of the best two, keep the best TG groups, then the
    // best K experts among them (HF DeepseekV3TopkRouter).
    std::vector<double> s(E), sel(E);
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t d = 0; d < D; ++d) l += double(x[n * D + d]) * gw[e * D + d];
      s[e] = 1 / (1 + std::exp(-l));
      sel[e] = s[e] + bias[e];
    }
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < G; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({v[0] + v[1], g});
    }
    std::sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
    std::vector<std::pair<double, int64_t>> cand;
    for (int64_t k = 0; k < TG; ++k)
      for (int64_t j = 0; j < per; ++j) cand.push_back({sel[groups[k].second * per + j], groups[k].second * per + j});
    std::sort(cand.begin(), cand.end(), [](auto a, auto b) { return a.first > b.first; });
    std::vector<int32_t> want, got(ex.begin() + n * K, ex.begin() + (n + 1) * K);
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) want.push_back(static_cast<int32_t>(cand[k].second)), sum += s[cand[k].second];
    std::vector<int32_t> ws = want, gs = got;
    std::sort(ws.begin(), ws.end());
    std::sort(gs.begin(), gs.end());
    ASSERT_EQ(gs, ws) << "token " << n;
    for (int64_t k = 0; k < K; ++k) EXPECT_NEAR(wt[n * K + k], s[got[k]] / sum * 2.5, 1e-5);
  }
}

TEST_F(CpuV3Ops, MlaAttentionMatchesNaiveLoop) {
  const int64_t H = 3, R = 10, P = 4;
  const int64_t starts[2] = {5, 0}, lens[2] = {3, 6};
  backend::Batch b;
  std::vector<std::vector<float>> lat, kpe;
  for (int s = 0; s < 2; ++s) {
    b.seqs.push_back({b.rows, lens[s], starts[s]});
    b.rows += lens[s];
    const int64_t T = starts[s] + lens[s] + 2;  // caches may be larger than needed
    lat.push_back(randn(rng, T * R));
    kpe.push_back(randn(rng, T * P));
  }
  const PagedMla c = paged_mla(*be, lat, R, kpe, P, 3, 23);  // blocks of 3 positions, scattered
  const int64_t N = b.rows;
  const std::vector<float> ql = randn(rng, N * H * R), qp = randn(rng, N * H * P);
  const float scale = 0.37f;
  const Tensor o =
      be->mla_attention(upload(ql, {N, H, R}), upload(qp, {N, H, P}), b, c.latent, c.k_pe, c.tables, backend::MlaParams{scale});
  std::vector<float> got(N * H * R);
  be->to_host(o, got.data());
  for (int s = 0; s < 2; ++s)
    for (int64_t i = 0; i < lens[s]; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = b.seqs[s].row + i, t = starts[s] + i;
        std::vector<double> sc;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t r = 0; r < R; ++r) d += double(ql[(row * H + h) * R + r]) * lat[s][j * R + r];
          for (int64_t r = 0; r < P; ++r) d += double(qp[(row * H + h) * P + r]) * kpe[s][j * P + r];
          sc.push_back(d * scale);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double& v : sc) sum += v = std::exp(v - mx);
        for (int64_t r = 0; r < R; ++r) {
          double want = 0;
          for (int64_t j = 0; j <= t; ++j) want += sc[j] / sum * lat[s][j * R + r];
          EXPECT_NEAR(got[(row * H + h) * R + r], want, 1e-5) << s << " " << i << " " << h << " " << r;
        }
      }
}

TEST_F(CpuV3Ops, ColumnsAndAdd) {
  const std::vector<float> x = randn(rng, 4 * 7), y = randn(rng, 4 * 7);
  std::vector<float> c(4 * 3), s(4 * 7);
  be->to_host(be->columns(upload(x, {4, 7}), 2, 3), c.data());
  be->to_host(be->add(upload(x, {4, 7}), upload(y, {4, 7}), backend::Round::None), s.data());
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c[n * 3 + j], x[n * 7 + 2 + j]);
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], x[i] + y[i]);
  EXPECT_THROW(be->columns(upload(x, {4, 7}), 5, 3), Error);
}

// An FP8 e4m3 weight with F32 128x128 block scales that are not powers of two (the V3 layout),
// so that e4m3 x scale needs rounding to bf16.
OwnedWeight fp8_f32_scaled(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  OwnedWeight w;
  w.format = WeightFormat::FP8Block128;
  w.dtype = DType::F8_E4M3;
  w.shape = {rows, cols};
  std::uniform_int_distribution<int> code(0, 0x7E);  // finite e4m3 codes, both signs
  std::uniform_int_distribution<int> sign(0, 1);
  for (int64_t i = 0; i < rows * cols; ++i) w.data.push_back(static_cast<uint8_t>(code(rng) | (sign(rng) << 7)));
  w.scale_shape = {(rows + 127) / 128, (cols + 127) / 128};
  std::uniform_real_distribution<float> sc(1e-3f, 3e-3f);
  for (int64_t i = 0; i < w.scale_shape[0] * w.scale_shape[1]; ++i) {
    const float v = sc(rng);
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    w.scale.insert(w.scale.end(), b, b + 4);
  }
  return w;
}

float ulp_bf16(float x) { return std::ldexp(1.f, std::ilogb(std::max(std::fabs(x), 1e-30f)) - 7); }

bool is_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0xFFFFu) == 0;
}

// LinearOpts::bf16_weight multiplies by the weight rounded to bf16 after dequantization, i.e.
// exactly a dense weight holding bf16(e4m3 * scale), and nothing else changes.
TEST_F(CpuV3Ops, LinearBf16WeightIsTheDequantizedWeightRoundedToBf16) {
  const int64_t N = 5, K = 200, M = 150;
  const OwnedWeight q = fp8_f32_scaled(rng, M, K);
  const WeightView qv = f32_scaled_view(q);
  std::vector<float> dq = decode_all(qv);
  int64_t changed = 0;
  for (float& v : dq) changed += bf16(v) != v, v = bf16(v);
  ASSERT_GT(changed, 0) << "the scales must make the bf16 rounding matter";
  const OwnedWeight dense = f32_weight({M, K}, dq);
  const std::vector<float> x = randn(rng, N * K);
  for (backend::Round r : {backend::Round::None, backend::Round::BF16}) {
    backend::LinearOpts o;
    o.out = r;
    o.bf16_weight = true;
    const std::vector<float> got = host(*be, be->linear(upload(x, {N, K}), qv, o));
    o.bf16_weight = false;
    EXPECT_EQ(got, host(*be, be->linear(upload(x, {N, K}), dense.view(), o)));
    EXPECT_NE(got, host(*be, be->linear(upload(x, {N, K}), qv, o)));
  }
}

// MlaParams::round BF16: s = bf16(bf16(bf16(q_lat.c) + bf16(q_pe.k_pe)) * scale), p = bf16(softmax
// in f32), o = bf16(sum p c); the inputs are bf16 tensors, as in the release.
TEST_F(CpuV3Ops, MlaAttentionBf16RoundsLikeTheRelease) {
  const int64_t H = 3, R = 24, P = 8, T = 9;
  backend::Batch b;
  b.seqs.push_back({0, 4, T - 4});
  b.rows = 4;
  auto bf = [](std::vector<float> v) {
    for (float& x : v) x = bf16(x);
    return v;
  };
  const std::vector<float> lat = bf(randn(rng, T * R)), kpe = bf(randn(rng, T * P));
  const std::vector<float> ql = bf(randn(rng, 4 * H * R, 0.5f)), qp = bf(randn(rng, 4 * H * P, 0.5f));
  const PagedMla c = paged_mla(*be, {lat}, R, {kpe}, P, 4, 29);
  const float scale = 0.29f;
  auto mla = [&](backend::Round r) {
    return host(*be, be->mla_attention(upload(ql, {4, H, R}), upload(qp, {4, H, P}), b, c.latent, c.k_pe, c.tables,
                                       backend::MlaParams{scale, r}));
  };
  const std::vector<float> got = mla(backend::Round::BF16), f32 = mla(backend::Round::None);
  EXPECT_NE(got, f32);
  int64_t exact = 0;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t t = T - 4 + i;
      std::vector<double> sc;
      for (int64_t j = 0; j <= t; ++j) {
        double dl = 0, dp = 0;
        for (int64_t r = 0; r < R; ++r) dl += double(ql[(i * H + h) * R + r]) * lat[j * R + r];
        for (int64_t r = 0; r < P; ++r) dp += double(qp[(i * H + h) * P + r]) * kpe[j * P + r];
        sc.push_back(bf16(bf16(bf16(float(dl)) + bf16(float(dp))) * scale));
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& v : sc) sum += v = std::exp(v - mx);
      for (int64_t r = 0; r < R; ++r) {
        double o = 0;
        for (int64_t j = 0; j <= t; ++j) o += double(bf16(float(sc[j] / sum))) * lat[j * R + r];
        const float want = bf16(float(o)), g = got[(i * H + h) * R + r];
        EXPECT_TRUE(is_bf16(g));
        EXPECT_LE(std::fabs(g - want), ulp_bf16(want)) << i << " " << h << " " << r;
        exact += g == want;
      }
    }
  EXPECT_GE(exact, 4 * H * R * 9 / 10);  // f32 vs double sums may decide a rounding now and then
}

// RouteParams::round BF16: bf16 gate weight, logits and sigmoid scores, f32 biased selection,
// weights bf16(bf16(s / bf16(sum)) * scale).
TEST_F(CpuV3Ops, RouteBf16FollowsTheReleaseGate) {
  const int64_t N = 30, D = 40, E = 16, G = 4, TG = 2, K = 4;
  std::vector<float> x = randn(rng, N * D);
  for (float& v : x) v = bf16(v);
  const std::vector<float> gw = randn(rng, E * D, 0.3f), bias = randn(rng, E, 0.05f);
  const OwnedWeight gate = f32_weight({E, D}, gw), bw = f32_weight({E}, bias);  // F32: rounded by the op
  const WeightView gv = gate.view(), bv = bw.view();
  const backend::RouteParams rp = v3_route(gv, bv, K, G, TG, backend::Round::BF16);
  const backend::Routing r = be->route(upload(x, {N, D}), Tensor(), rp);
  const std::vector<int32_t> ex = host_i32(*be, r.experts);
  const std::vector<float> wt = host(*be, r.weights);
  int64_t same = 0;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> s(E);
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t d = 0; d < D; ++d) l += double(x[n * D + d]) * bf16(gw[e * D + d]);
      s[e] = bf16(1.f / (1.f + std::exp(-bf16(float(l)))));
    }
    const std::vector<int32_t> got(ex.begin() + n * K, ex.begin() + (n + 1) * K);
    EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()).size(), static_cast<std::size_t>(K));
    float sum = 0;
    for (int32_t e : got) sum += s[e];
    sum = bf16(sum);
    for (int64_t k = 0; k < K; ++k) {
      const float want = bf16(bf16(s[got[k]] / sum) * 2.5f);
      EXPECT_TRUE(is_bf16(wt[n * K + k]));
      EXPECT_LE(std::fabs(wt[n * K + k] - want), ulp_bf16(want)) << n << " " << k;
      same += wt[n * K + k] == want;
    }
  }
  EXPECT_GE(same, N * K * 9 / 10);
}

// MoeParams for the release's V3 experts: bf16 weights, w1/w3/silu/product/w2 each bf16, the
// routing weight applied to the expert's output, bf16 accumulation over experts in id order, and
// bf16 (y + shared).
TEST_F(CpuV3Ops, MoeBf16AccumulatesLikeTheRelease) {
  const int64_t N = 7, D = 24, E = 4, K = 2, I = 16;
  std::vector<float> x = randn(rng, N * D);
  for (float& v : x) v = bf16(v);
  std::vector<OwnedWeight> own;
  for (int e = 0; e < E + 1; ++e) {
    own.push_back(fp8_f32_scaled(rng, I, D));  // w1
    own.push_back(fp8_f32_scaled(rng, D, I));  // w2
    own.push_back(fp8_f32_scaled(rng, I, D));  // w3
  }
  std::vector<WeightView> views;
  for (const OwnedWeight& w : own) views.push_back(f32_scaled_view(w));
  std::vector<backend::SwiGluWeights> experts;
  for (int e = 0; e < E; ++e) experts.push_back({&views[3 * e], &views[3 * e + 1], &views[3 * e + 2]});
  const backend::SwiGluWeights shared{&views[3 * E], &views[3 * E + 1], &views[3 * E + 2]};
  std::vector<int32_t> ids(N * K);
  std::vector<float> wts(N * K);
  for (int64_t n = 0; n < N; ++n) {
    ids[n * K] = static_cast<int32_t>((n + 1) % E), ids[n * K + 1] = static_cast<int32_t>(n % E);  // not in id order
    wts[n * K] = bf16(0.3f + 0.1f * n), wts[n * K + 1] = bf16(1.7f - 0.1f * n);
  }
  const backend::Routing r{be->from_host(ids.data(), {N, K}), upload(wts, {N, K})};
  backend::MoeParams mp;
  mp.round = backend::Round::BF16;
  mp.bf16_weight = true;
  mp.silu_out = backend::Round::BF16;
  mp.weight_after = true;
  mp.accumulate = backend::Round::BF16;
  const std::vector<float> got = host(*be, be->moe(upload(x, {N, D}), r, experts, shared, mp));
  auto ffn = [&](const backend::SwiGluWeights& s, int64_t n) {
    std::vector<float> w1 = decode_all(*s.w1), w2 = decode_all(*s.w2), w3 = decode_all(*s.w3);
    for (auto* w : {&w1, &w2, &w3})
      for (float& v : *w) v = bf16(v);
    std::vector<float> h(I), y(D);
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t d = 0; d < D; ++d) {
        g += double(w1[i * D + d]) * x[n * D + d];
        u += double(w3[i * D + d]) * x[n * D + d];
      }
      const float gb = bf16(float(g)), ub = bf16(float(u));
      h[i] = bf16(bf16(gb / (1.f + std::exp(-gb))) * ub);
    }
    for (int64_t d = 0; d < D; ++d) {
      double v = 0;
      for (int64_t i = 0; i < I; ++i) v += double(w2[d * I + i]) * h[i];
      y[d] = bf16(float(v));
    }
    return y;
  };
  int64_t exact = 0;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> acc(D, 0.f);
    for (int32_t e = 0; e < E; ++e)  // expert-id order
      for (int64_t k = 0; k < K; ++k)
        if (ids[n * K + k] == e) {
          const std::vector<float> ye = ffn(experts[e], n);
          for (int64_t d = 0; d < D; ++d) acc[d] = bf16(acc[d] + bf16(ye[d] * wts[n * K + k]));
        }
    const std::vector<float> z = ffn(shared, n);
    for (int64_t d = 0; d < D; ++d) {
      const float want = bf16(acc[d] + z[d]), g = got[n * D + d];
      EXPECT_TRUE(is_bf16(g));
      EXPECT_LE(std::fabs(g - want), 2 * ulp_bf16(want)) << n << " " << d;
      exact += g == want;
    }
  }
  EXPECT_GE(exact, N * D * 9 / 10);
}

}  // namespace
}  // namespace plumb
