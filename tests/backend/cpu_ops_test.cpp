// CPU backend ops against naive loops (double accumulation) on random inputs: linear in every
// weight format, norms, RoPE, mHC, the quantization ops and the embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "op_test_util.h"
#include "plumb/backend/backend.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Round;
using backend::Tensor;

using CpuOps = CpuOpTest<42>;

// y = x . w^T with w decoded by plumb::decode_rows (not the backend's decoder).
std::vector<double> naive_linear(const std::vector<float>& x, int64_t N, const WeightView& w, int64_t groups) {
  const std::vector<float> wf = decode_all(w);
  const int64_t R = w.rows() / groups, K = w.cols();
  std::vector<double> y(static_cast<std::size_t>(N * groups * R));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t r = 0; r < R; ++r) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(x[n * groups * K + g * K + k]) * wf[(g * R + r) * K + k];
        y[n * groups * R + g * R + r] = acc;
      }
  return y;
}

TEST_F(CpuOps, LinearEveryWeightFormat) {
  const int64_t N = 5, R = 37, K = 200;  // K not a multiple of 128 or 32*... , R not of 16
  const std::vector<float> x = randn(rng, N * K), wv = randn(rng, R * K, 0.1f);
  for (const OwnedWeight& w : {fp8_weight(R, K, wv), fp4_weight(R, K, wv), bf16_weight({R, K}, wv), f32_weight({R, K}, wv)}) {
    const Tensor y = be->linear(upload(x, {N, K}), w.view(), {});
    EXPECT_EQ(y.shape(), (backend::Shape{N, R}));
    EXPECT_LT(rel_diff(host(*be, y), naive_linear(x, N, w.view(), 1)), 1e-6) << weight_format_name(w.format);
  }
}

TEST_F(CpuOps, LinearGroupedActQuantAndBf16Output) {
  const int64_t N = 3, G = 2, R = 24, K = 160;
  const std::vector<float> x = randn(rng, N * G * K), wv = randn(rng, G * R * K, 0.1f);
  const OwnedWeight w = fp8_weight(G * R, K, wv);
  // grouped: x [N, 2, K] -> y [N, 2R]
  Tensor y = be->linear(upload(x, {N, G * K}), w.view(), {G, false, Round::None});
  EXPECT_LT(rel_diff(host(*be, y), naive_linear(x, N, w.view(), G)), 1e-6);
  // act-quant (per group's K, blocks of 128 with a trailing 32) and bf16 output
  std::vector<float> xq = x;
  naive_act_quant(xq, N * G, K);
  std::vector<double> ref = naive_linear(xq, N, w.view(), G);
  y = be->linear(upload(x, {N, G * K}), w.view(), {G, true, Round::BF16});
  const std::vector<float> got = host(*be, y);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], bf16(got[i]));                              // bf16 values
    EXPECT_NEAR(got[i], ref[i], std::fabs(ref[i]) * 0.008 + 1e-6);  // within one bf16 ulp
  }
}

TEST_F(CpuOps, RmsNorm) {
  const int64_t N = 4, D = 80;
  const std::vector<float> x = randn(rng, N * D, 2.f), wv = randn(rng, D, 0.1f, 1.f);
  const OwnedWeight w = bf16_weight({D}, wv);
  const WeightView view = w.view();
  const std::vector<float> wd = decode_all(view);
  for (bool weighted : {true, false}) {
    const Tensor y = be->rms_norm(upload(x, {N, D}), weighted ? &view : nullptr, 1e-6f, backend::NormMath::F32, Round::None);
    std::vector<double> ref(x.size());
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += double(x[n * D + d]) * x[n * D + d];
      const double r = 1 / std::sqrt(ss / D + 1e-6);
      for (int64_t d = 0; d < D; ++d) ref[n * D + d] = x[n * D + d] * r * (weighted ? wd[d] : 1.0);
    }
    EXPECT_LT(rel_diff(host(*be, y), ref), 1e-6);
  }
}

TEST_F(CpuOps, RmsNormBf16StepsRoundsEveryStep) {
  // One vector where each rounding is checkable: x = bf16 values, result = bf16(x * r), r a bf16.
  std::vector<float> x = randn(rng, 64);
  for (auto& v : x) v = bf16(v);
  const std::vector<float> got = host(*be, be->rms_norm(upload(x, {1, 64}), nullptr, 1e-6f, backend::NormMath::BF16Steps, Round::BF16));
  float ss = 0;
  for (float v : x) ss += bf16(v * v);
  const float r = bf16(1.f / std::sqrt(bf16(bf16(ss / 64.f) + 1e-6f)));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], bf16(x[i] * r));
}

TEST_F(CpuOps, RopeInterleavedOnTheLastDimsAndInverse) {
  const int64_t N = 3, H = 2, Dh = 12, F = 4;  // rotate dims 4..11 as 4 pairs
  const std::vector<float> x = randn(rng, N * H * Dh), f = {1.f, 0.3f, 0.05f, 0.001f};
  const std::vector<int32_t> pos = {0, 7, 300};
  const Tensor p = be->from_host(pos.data(), {N}), fr = upload(f, {F});
  const Tensor y = be->rope(upload(x, {N, H, Dh}), p, fr, false, Round::None);
  std::vector<double> ref(x.begin(), x.end());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < F; ++i) {
        const double a = static_cast<float>(pos[n]) * f[i];
        const int64_t o = (n * H + h) * Dh + (Dh - 2 * F) + 2 * i;
        ref[o] = x[o] * std::cos(a) - x[o + 1] * std::sin(a);
        ref[o + 1] = x[o] * std::sin(a) + x[o + 1] * std::cos(a);
      }
  EXPECT_LT(rel_diff(host(*be, y), ref), 2e-6);
  const std::vector<double> orig(x.begin(), x.end());
  EXPECT_LT(rel_diff(host(*be, be->rope(y, p, fr, true, Round::None)), orig), 2e-6);
}

// mHC reference in double: the formulas of MODEL-SPEC 3.2 written out directly.
struct NaiveHc {
  int64_t hc, D, iters;
  std::vector<float> fn, base, scale;
  std::vector<double> mix(const float* x) const {
    const int64_t W = hc * D, n_out = static_cast<int64_t>(base.size());
    double ss = 0;
    for (int64_t i = 0; i < W; ++i) ss += double(x[i]) * x[i];
    const double r = 1 / std::sqrt(ss / W + 1e-6);
    std::vector<double> m(static_cast<std::size_t>(n_out));
    for (int64_t k = 0; k < n_out; ++k) {
      double a = 0;
      for (int64_t i = 0; i < W; ++i) a += double(fn[k * W + i]) * x[i] * r;
      m[k] = a;
    }
    return m;
  }
  static double sig(double v) { return 1 / (1 + std::exp(-v)); }
};

TEST_F(CpuOps, HcPrePostHead) {
  const int64_t N = 3, hc = 4, D = 16, W = hc * D, n_out = (2 + hc) * hc, iters = 20;
  NaiveHc nh{hc, D, iters, randn(rng, n_out * W, 0.1f), randn(rng, n_out, 0.5f), randn(rng, 3, 0.2f, 0.6f)};
  const OwnedWeight fn = f32_weight({n_out, W}, nh.fn), base = f32_weight({n_out}, nh.base), sc = f32_weight({3}, nh.scale);
  const WeightView fv = fn.view(), bv = base.view(), sv = sc.view();
  const std::vector<float> X = randn(rng, N * W);
  const backend::HcParams p{&fv, &bv, &sv, iters, 1e-6f, 1e-6f};
  const backend::HcPreResult r = be->hc_pre(upload(X, {N, hc, D}), p, Round::None);

  std::vector<double> y_ref, post_ref, comb_ref;
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<double> m = nh.mix(X.data() + n * W);
    std::vector<double> pre(hc), C(hc * hc);
    for (int64_t i = 0; i < hc; ++i) {
      pre[i] = NaiveHc::sig(m[i] * nh.scale[0] + nh.base[i]) + 1e-6;
      post_ref.push_back(2 * NaiveHc::sig(m[hc + i] * nh.scale[1] + nh.base[hc + i]));
    }
    for (int64_t k = 0; k < hc * hc; ++k) C[k] = m[2 * hc + k] * nh.scale[2] + nh.base[2 * hc + k];
    for (int64_t i = 0; i < hc; ++i) {  // softmax over each row, + eps
      double mx = -1e300, s = 0;
      for (int64_t j = 0; j < hc; ++j) mx = std::max(mx, C[i * hc + j]);
      for (int64_t j = 0; j < hc; ++j) s += std::exp(C[i * hc + j] - mx);
      for (int64_t j = 0; j < hc; ++j) C[i * hc + j] = std::exp(C[i * hc + j] - mx) / s + 1e-6;
    }
    for (int64_t it = 0; it < iters; ++it) {
      if (it > 0)
        for (int64_t i = 0; i < hc; ++i) {
          double s = 0;
          for (int64_t j = 0; j < hc; ++j) s += C[i * hc + j];
          for (int64_t j = 0; j < hc; ++j) C[i * hc + j] /= s + 1e-6;
        }
      for (int64_t j = 0; j < hc; ++j) {
        double s = 0;
        for (int64_t i = 0; i < hc; ++i) s += C[i * hc + j];
        for (int64_t i = 0; i < hc; ++i) C[i * hc + j] /= s + 1e-6;
      }
    }
    comb_ref.insert(comb_ref.end(), C.begin(), C.end());
    for (int64_t d = 0; d < D; ++d) {
      double a = 0;
      for (int64_t i = 0; i < hc; ++i) a += pre[i] * X[n * W + i * D + d];
      y_ref.push_back(a);
    }
  }
  EXPECT_LT(rel_diff(host(*be, r.y), y_ref), 1e-5);
  EXPECT_LT(rel_diff(host(*be, r.post), post_ref), 1e-5);
  EXPECT_LT(rel_diff(host(*be, r.comb), comb_ref), 1e-5);

  // hc_post: X_new[j] = post_j * out + sum_i comb[i][j] X[i]
  const std::vector<float> out = randn(rng, N * D), post = host(*be, r.post), comb = host(*be, r.comb);
  const Tensor Xn = be->hc_post(upload(out, {N, D}), upload(X, {N, hc, D}), r.post, r.comb, Round::None);
  std::vector<double> xn_ref;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < hc; ++j)
      for (int64_t d = 0; d < D; ++d) {
        double a = double(post[n * hc + j]) * out[n * D + d];
        for (int64_t i = 0; i < hc; ++i) a += double(comb[n * hc * hc + i * hc + j]) * X[n * W + i * D + d];
        xn_ref.push_back(a);
      }
  EXPECT_LT(rel_diff(host(*be, Xn), xn_ref), 1e-6);

  // hc_head: pre from the first hc mixes, no Sinkhorn
  NaiveHc hh{hc, D, 0, randn(rng, hc * W, 0.1f), randn(rng, hc, 0.5f), {0.7f}};
  const OwnedWeight hfn = f32_weight({hc, W}, hh.fn), hb = f32_weight({hc}, hh.base), hs = f32_weight({1}, hh.scale);
  const WeightView hfv = hfn.view(), hbv = hb.view(), hsv = hs.view();
  const Tensor yh = be->hc_head(upload(X, {N, hc, D}), {&hfv, &hbv, &hsv, 0, 1e-6f, 1e-6f}, Round::None);
  std::vector<double> yh_ref;
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<double> m = hh.mix(X.data() + n * W);
    for (int64_t d = 0; d < D; ++d) {
      double a = 0;
      for (int64_t i = 0; i < hc; ++i) a += (NaiveHc::sig(m[i] * 0.7f + hh.base[i]) + 1e-6) * X[n * W + i * D + d];
      yh_ref.push_back(a);
    }
  }
  EXPECT_LT(rel_diff(host(*be, yh), yh_ref), 1e-5);
}

TEST_F(CpuOps, QuantOpsOnTensors) {
  const int64_t N = 2, D = 80;  // nope = 64 dims in one block of 64, rope dims 64..79 untouched
  std::vector<float> x = randn(rng, N * D);
  const std::vector<float> q8 = host(*be, be->quant_fp8(upload(x, {N, D}), 64, 64));
  std::vector<float> ref = x;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> row(x.begin() + n * D, x.begin() + n * D + 64);
    naive_act_quant(row, 1, 64, 64);
    std::copy(row.begin(), row.end(), ref.begin() + n * D);
  }
  EXPECT_EQ(q8, ref);
  // FP4 values land on the e2m1 grid times a power of two; Hadamard keeps the norm.
  const std::vector<float> q4 = host(*be, be->quant_fp4(upload(x, {N, D}), 32));
  for (int64_t b = 0; b < N * D / 32 + 1; ++b) {
    const int64_t e = std::min<int64_t>(N * D, (b + 1) * 32);
    for (int64_t i = b * 32; i < e; ++i) EXPECT_LE(std::fabs(q4[i] - x[i]), 1.0);
  }
  const std::vector<float> h = host(*be, be->hadamard(upload(x, {N, 2, 40}).reshaped({N * 5, 16}), Round::None));
  double n0 = 0, n1 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) n0 += double(x[i]) * x[i], n1 += double(h[i]) * h[i];
  EXPECT_NEAR(n0, n1, 1e-4 * n0);
}

TEST_F(CpuOps, EmbedRejectsIdsOutsideTheVocabulary) {
  const std::vector<float> table = randn(rng, 10 * 4);
  const OwnedWeight w = bf16_weight({10, 4}, table);
  const std::vector<int32_t> ok = {3, 9}, bad = {3, 10};
  const std::vector<float> y = host(*be, be->embed(w.view(), be->from_host(ok.data(), {2})));
  for (int d = 0; d < 4; ++d) EXPECT_EQ(y[4 + d], bf16(table[9 * 4 + d]));
  EXPECT_THROW(be->embed(w.view(), be->from_host(bad.data(), {2})), Error);
  // host ids (a device backend checks them instead of copying the ids back) must equal the ids
  EXPECT_EQ(host(*be, be->embed(w.view(), be->from_host(ok.data(), {2}), ok)), y);
  EXPECT_THROW(be->embed(w.view(), be->from_host(ok.data(), {2}), bad), Error);
}

}  // namespace
}  // namespace plumb::test
