// CPU ops added for DeepSeek-V3 against naive loops: sigmoid routing with group-limited top-k,
// absorbed MLA attention over ragged batches, column slices and the residual add.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "op_test_util.h"
#include "plumb/backend/backend.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Tensor;

class CpuV3Ops : public ::testing::Test {
 protected:
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(2);
  std::mt19937_64 rng{11};
  Tensor upload(const std::vector<float>& v, backend::Shape s) { return be->from_host(v.data(), std::move(s)); }
};

TEST_F(CpuV3Ops, GroupLimitedSigmoidRouting) {
  const int64_t N = 40, D = 24, E = 16, G = 4, TG = 2, K = 4, per = E / G;
  const std::vector<float> x = randn(rng, N * D), gw = randn(rng, E * D, 0.3f), bias = randn(rng, E, 0.2f);
  const OwnedWeight gate = f32_weight({E, D}, gw), b = f32_weight({E}, bias);
  const WeightView gv = gate.view(), bv = b.view();
  backend::RouteParams rp;
  rp.gate = &gv;
  rp.bias = &bv;
  rp.top_k = K;
  rp.route_scale = 2.5f;
  rp.scoring = backend::Scoring::Sigmoid;
  rp.n_group = G;
  rp.topk_group = TG;
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
  std::vector<Tensor> lat_t, kpe_t;
  for (int s = 0; s < 2; ++s) {
    b.seqs.push_back({b.rows, lens[s], starts[s]});
    b.rows += lens[s];
    const int64_t T = starts[s] + lens[s] + 2;  // caches may be larger than needed
    lat.push_back(randn(rng, T * R));
    kpe.push_back(randn(rng, T * P));
    lat_t.push_back(upload(lat.back(), {T, R}));
    kpe_t.push_back(upload(kpe.back(), {T, P}));
  }
  const int64_t N = b.rows;
  const std::vector<float> ql = randn(rng, N * H * R), qp = randn(rng, N * H * P);
  const float scale = 0.37f;
  const Tensor o = be->mla_attention(upload(ql, {N, H, R}), upload(qp, {N, H, P}), b, lat_t, kpe_t, scale);
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

}  // namespace
}  // namespace plumb
