// mHC: hc_pre (with the Sinkhorn projection), hc_post and hc_head (MODEL-SPEC 3.2).
#include <cmath>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/weight_decode.h"

namespace plumb::cpu {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + exp_cr(-x)); }

struct HcSite {
  std::vector<float> fn, base, scale;
  int64_t n_out = 0;
};

// The site's parameters decoded (check_hc_pre / check_hc_head have checked their shapes).
HcSite load_site(const HcParams& p, int64_t n_out) {
  return {decode_all(*p.fn), decode_all(*p.base), decode_all(*p.scale), n_out};
}

// m = (fn . x) / sqrt(mean(x^2) + eps): the linear applied to the unweighted-RMS-normalised
// stream vector, computed as the release does (product first, then the scalar).
// `order` other than Canonical: an experiment (CpuBackend::SumOrders).
void mixes(const HcSite& s, const float* x, int64_t width, float norm_eps, SumOrder order, float* m) {
  float ss = 0.f;
  if (order != SumOrder::Canonical) ss = dot_other(x, x, width, order);
  else
    for (int64_t i = 0; i < width; ++i) ss += x[i] * x[i];
  const float r = 1.0f / std::sqrt(ss * (1.0f / static_cast<float>(width)) + norm_eps);
  for (int64_t k = 0; k < s.n_out; ++k) m[k] = dot(s.fn.data() + k * width, x, width, order) * r;
}

// y = sum_i pre_i * X[i], streams added in order.
void collapse(const float* X, const float* pre, int64_t hc, int64_t D, float* y) {
  for (int64_t d = 0; d < D; ++d) {
    float acc = 0.f;
    for (int64_t i = 0; i < hc; ++i) acc += pre[i] * X[i * D + d];
    y[d] = acc;
  }
}

// Sinkhorn in the release's order: row softmax + eps, a column normalisation, then iters - 1
// rounds of (row, column) normalisation; every divisor is sum + eps.
void sinkhorn(float* C, int64_t hc, int64_t iters, float eps) {
  auto normalize_cols = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float s = 0.f;
      for (int64_t i = 0; i < hc; ++i) s += C[i * hc + j];
      for (int64_t i = 0; i < hc; ++i) C[i * hc + j] /= (s + eps);
    }
  };
  for (int64_t i = 0; i < hc; ++i) {
    float* row = C + i * hc;
    float mx = row[0];
    for (int64_t j = 1; j < hc; ++j) mx = std::max(mx, row[j]);
    float s = 0.f;
    for (int64_t j = 0; j < hc; ++j) s += (row[j] = exp_cr(row[j] - mx));
    for (int64_t j = 0; j < hc; ++j) row[j] = row[j] / s + eps;
  }
  normalize_cols();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t i = 0; i < hc; ++i) {
      float* row = C + i * hc;
      float s = 0.f;
      for (int64_t j = 0; j < hc; ++j) s += row[j];
      for (int64_t j = 0; j < hc; ++j) row[j] /= (s + eps);
    }
    normalize_cols();
  }
}

}  // namespace

HcPreResult CpuBackend::hc_pre(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_pre(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D, W = hc * D;
  const HcSite s = load_site(p, (2 + hc) * hc);
  HcPreResult r{new_f32({N, D}), new_f32({N, hc}), new_f32({N, hc, hc})};
  pool().parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> m(static_cast<std::size_t>(s.n_out)), pre(static_cast<std::size_t>(hc));
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = f32(X) + n * W;
      mixes(s, x, W, p.norm_eps, order(kHc), m.data());
      float* post = f32(r.post) + n * hc;
      float* C = f32(r.comb) + n * hc * hc;
      for (int64_t i = 0; i < hc; ++i) {
        pre[i] = sigmoid(m[i] * s.scale[0] + s.base[i]) + p.hc_eps;
        post[i] = 2.0f * sigmoid(m[hc + i] * s.scale[1] + s.base[hc + i]);
      }
      for (int64_t k = 0; k < hc * hc; ++k) C[k] = m[2 * hc + k] * s.scale[2] + s.base[2 * hc + k];
      sinkhorn(C, hc, p.sinkhorn_iters, p.hc_eps);
      float* y = f32(r.y) + n * D;
      collapse(x, pre.data(), hc, D, y);
      apply_round(y, D, out);
    }
  });
  return r;
}

Tensor CpuBackend::hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb, Round rnd) {
  const HcDims d = check_hc_post(out, X, post, comb);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  Tensor y = new_f32({N, hc, D});
  pool().parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* o = f32(out) + n * D;
      const float* x = f32(X) + n * hc * D;
      const float* pw = f32(post) + n * hc;
      const float* C = f32(comb) + n * hc * hc;
      float* yn = f32(y) + n * hc * D;
      // X_new[j] = post_j * out + sum_i C[i][j] * X[i]  (C transposed: the sum runs over i)
      for (int64_t j = 0; j < hc; ++j)
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0.f;
          for (int64_t i = 0; i < hc; ++i) acc += C[i * hc + j] * x[i * D + d];
          yn[j * D + d] = pw[j] * o[d] + acc;
        }
      apply_round(yn, hc * D, rnd);
    }
  });
  return y;
}

Tensor CpuBackend::hc_head(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_head(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D, W = hc * D;
  const HcSite s = load_site(p, hc);
  Tensor y = new_f32({N, D});
  pool().parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> m(static_cast<std::size_t>(hc)), pre(static_cast<std::size_t>(hc));
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = f32(X) + n * W;
      mixes(s, x, W, p.norm_eps, order(kHc), m.data());
      for (int64_t i = 0; i < hc; ++i) pre[i] = sigmoid(m[i] * s.scale[0] + s.base[i]) + p.hc_eps;
      collapse(x, pre.data(), hc, D, f32(y) + n * D);
      apply_round(f32(y) + n * D, D, out);
    }
  });
  return y;
}

}  // namespace plumb::cpu
