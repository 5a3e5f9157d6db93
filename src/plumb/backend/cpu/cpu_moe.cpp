// MoE routing (hash or score top-k) and the SwiGLU experts (MODEL-SPEC 3.8).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/gemm.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"
#include "plumb/util/error.h"

namespace plumb::cpu {
namespace {

float softplus(float x) { return x > 20.f ? x : log1p_cr(exp_cr(x)); }  // torch's threshold 20

}  // namespace

Routing CpuBackend::route(const Tensor& x, const Tensor& ids, const RouteParams& p) {
  const RouteDims d = check_route(x, ids, p);
  const int64_t N = d.N, D = d.D, E = d.E, K = d.K, G = d.G, TG = d.TG;
  std::vector<float> bias;
  if (p.bias) bias = decode_all(*p.bias);
  const bool bf16 = p.round == Round::BF16;
  std::vector<float> logits(static_cast<std::size_t>(N * E));
  gemm_wt(pool(), f32(x), N, D, *p.gate, 0, E, logits.data(), E, bf16, order(kGate));  // f32 gate, or bf16 weight
  if (bf16) round_bf16(logits.data(), N * E);                            // and bf16 logits (V3 release)
  Routing r{new_i32({N, K}), new_f32({N, K})};
  std::vector<int32_t> hashed;
  if (p.tid2eid) {
    const std::span<const int32_t> id{i32(ids, "token ids"), static_cast<std::size_t>(N)};
    // The caller's host copy must be these ids (a device backend looks tid2eid up on it instead).
    if (!p.host_ids.empty() && !std::equal(id.begin(), id.end(), p.host_ids.begin()))
      fail("route: the host token ids differ from the token ids");
    hashed = hash_experts(*p.tid2eid, id, K, E);
  }
  std::vector<float> score(static_cast<std::size_t>(E)), sel(static_cast<std::size_t>(E));
  std::vector<int32_t> order(static_cast<std::size_t>(E)), gorder(static_cast<std::size_t>(G));
  std::vector<float> gscore(static_cast<std::size_t>(G));
  const int64_t per = E / G;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t e = 0; e < E; ++e) {
      const float l = logits[n * E + e];
      score[e] = p.scoring == Scoring::Sigmoid ? 1.f / (1.f + exp_cr(-l)) : std::sqrt(softplus(l));
      if (bf16) score[e] = round_bf16(score[e]);  // sigmoid of a bf16 tensor; + the f32 bias promotes to f32
      sel[e] = bias.empty() ? score[e] : score[e] + bias[e];  // the bias picks, it never weighs
    }
    if (G > 1) {  // drop all but the topk_group best groups (score: sum of the group's best two)
      for (int64_t g = 0; g < G; ++g) {
        const float* s = sel.data() + g * per;
        const int64_t a = std::max_element(s, s + per) - s;
        float second = -INFINITY;
        for (int64_t j = 0; j < per; ++j)
          if (j != a) second = std::max(second, s[j]);
        gscore[g] = s[a] + second;
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::stable_sort(gorder.begin(), gorder.end(), [&](int32_t a, int32_t b) { return gscore[a] > gscore[b]; });
      for (int64_t g = TG; g < G; ++g) std::fill_n(sel.begin() + gorder[g] * per, per, -INFINITY);
    }
    int32_t* ex = i32(r.experts) + n * K;
    if (p.tid2eid) {
      std::copy_n(hashed.begin() + n * K, K, ex);
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [&](int32_t a, int32_t b) { return sel[a] != sel[b] ? sel[a] > sel[b] : a < b; });
      std::copy(order.begin(), order.begin() + K, ex);
    }
    float sum = 0.f;
    for (int64_t k = 0; k < K; ++k) sum += score[ex[k]];
    float* w = f32(r.weights) + n * K;
    if (bf16) {  // weights /= weights.sum(); weights *= route_scale, each on a bf16 tensor
      sum = round_bf16(sum);
      for (int64_t k = 0; k < K; ++k) w[k] = round_bf16(round_bf16(score[ex[k]] / sum) * p.route_scale);
    } else {
      for (int64_t k = 0; k < K; ++k) w[k] = score[ex[k]] / sum * p.route_scale;
    }
  }
  return r;
}

namespace {

// One SwiGLU expert (intermediate size I, from check_swiglu) on M gathered rows:
// out = w2(bf16?(weight * silu(min(g, L)) * clamp(u, -L, L))),
// with the routing weight (row_weight, or null) applied here only when !p.weight_after.
void swiglu(ThreadPool& pool, const SwiGluWeights& w, int64_t I, const float* x, int64_t M, int64_t D,
            const float* row_weight, float limit, const MoeParams& p, SumOrder order, float* out) {
  const Round round = p.round;
  std::vector<float> xin(x, x + M * D), g(static_cast<std::size_t>(M * I)), u(g.size());
  if (p.act_fp8) act_quant_fp8_rows(xin.data(), M, D);
  gemm_wt(pool, xin.data(), M, D, *w.w1, 0, I, g.data(), I, p.bf16_weight, order);
  gemm_wt(pool, xin.data(), M, D, *w.w3, 0, I, u.data(), I, p.bf16_weight, order);
  apply_round(g.data(), M * I, round);
  apply_round(u.data(), M * I, round);
  const bool silu_bf16 = p.silu_out == Round::BF16;
  for (int64_t i = 0; i < M * I; ++i) {
    float gi = g[i], ui = u[i];
    if (limit > 0.f) {
      gi = std::min(gi, limit);
      ui = std::clamp(ui, -limit, limit);
    }
    float h;
    if (silu_bf16) {
      h = round_bf16(gi / (1.0f + exp_cr(-gi))) * ui;  // F.silu(bf16) * bf16: two roundings
    } else {
      h = gi / (1.0f + exp_cr(-gi)) * ui;
    }
    if (row_weight && !p.weight_after) h = row_weight[i / I] * h;  // routing weight before w2 (and its act-quant)
    g[i] = h;
  }
  apply_round(g.data(), M * I, round);
  if (p.act_fp8) act_quant_fp8_rows(g.data(), M, I);
  gemm_wt(pool, g.data(), M, I, *w.w2, 0, D, out, D, p.bf16_weight, order);
  apply_round(out, M * D, round);
}

// The (token, slot) pairs routed to expert e, in (token, slot) order, and their weights.
void slots_of(const int32_t* ex, const float* wt, int64_t N, int64_t K, int64_t e, std::vector<int64_t>& slots,
              std::vector<float>& ws) {
  slots.clear();
  ws.clear();
  for (int64_t s = 0; s < N * K; ++s)
    if (ex[s] == e) slots.push_back(s), ws.push_back(wt[s]);
}

// Expert e on its slots' tokens: ys [M, D] the terms moe() adds (the routing weight applied
// after w2 with p.weight_after, before it otherwise).
void expert_terms(ThreadPool& pool, const SwiGluWeights& w, int64_t e, const float* x, std::span<const int64_t> slots,
                  std::span<const float> ws, int64_t K, int64_t D, const MoeParams& p, SumOrder order,
                  std::vector<float>& ys) {
  const int64_t M = static_cast<int64_t>(slots.size());
  std::vector<float> xs(static_cast<std::size_t>(M * D));
  ys.resize(xs.size());
  for (int64_t i = 0; i < M; ++i)
    std::memcpy(&xs[i * D], x + slots[i] / K * D, static_cast<std::size_t>(D) * sizeof(float));
  const int64_t I = check_swiglu(w, D, fmt::format("routed expert {}", e));
  swiglu(pool, w, I, xs.data(), M, D, ws.data(), p.swiglu_limit, p, order, ys.data());
  if (p.weight_after)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t d = 0; d < D; ++d) ys[i * D + d] = ys[i * D + d] * ws[i];
}

// acc += term (bf16 accumulation: y[idx] += expert(x[idx]) * weight, y a bf16 tensor).
void accumulate(float* acc, const float* term, int64_t D, const MoeParams& p) {
  if (p.accumulate == Round::BF16) {
    for (int64_t d = 0; d < D; ++d) acc[d] = round_bf16(acc[d] + round_bf16(term[d]));
  } else {
    for (int64_t d = 0; d < D; ++d) acc[d] += term[d];
  }
}

// acc (the routed sums) + the shared expert, rounded as the op's output.
Tensor add_shared(ThreadPool& pool, const std::vector<float>& acc, const float* x, const SwiGluWeights& shared,
                  int64_t shared_I, int64_t N, int64_t D, const MoeParams& p, SumOrder order, Tensor y) {
  std::vector<float> ys(static_cast<std::size_t>(N * D));
  swiglu(pool, shared, shared_I, x, N, D, nullptr, p.clamp_shared ? p.swiglu_limit : 0.f, p, order, ys.data());
  float* yp = f32(y);
  for (int64_t i = 0; i < N * D; ++i) yp[i] = acc[i] + ys[i];
  apply_round(yp, N * D, p.round);
  return y;
}

}  // namespace

Tensor CpuBackend::moe(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                       const SwiGluWeights& shared, const MoeParams& p) {
  const MoeDims d = check_moe(x, r, shared);
  const int64_t N = d.N, D = d.D, K = d.K, E = static_cast<int64_t>(experts.size());
  const int32_t* ex = i32(r.experts, "routed experts");
  const float* wt = f32(r.weights, "routing weights");
  const float* xp = f32(x, "moe input");
  std::vector<float> acc(static_cast<std::size_t>(N * D), 0.f), ws, ys;
  std::vector<int64_t> slots;
  // Expert by expert in id order, so each token's sum runs over its experts in id order.
  for (int64_t e = 0; e < E; ++e) {
    slots_of(ex, wt, N, K, e, slots, ws);
    if (slots.empty()) continue;
    expert_terms(pool(), experts[e], e, xp, slots, ws, K, D, p, order(kLinear), ys);
    for (std::size_t i = 0; i < slots.size(); ++i) accumulate(&acc[slots[i] / K * D], &ys[i * D], D, p);
  }
  return add_shared(pool(), acc, xp, shared, d.shared_I, N, D, p, order(kLinear), new_f32({N, D}));
}

Tensor CpuBackend::moe_terms(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                             std::pair<int64_t, int64_t> owned, const MoeParams& p) {
  const MoeDims d = check_moe_routing(x, r);
  const int64_t N = d.N, D = d.D, K = d.K, E = static_cast<int64_t>(experts.size());
  if (owned.first < 0 || owned.first > owned.second || owned.second > E)
    fail("moe_terms: owned experts [{}, {}) are not a range of the {} experts", owned.first, owned.second, E);
  const int32_t* ex = i32(r.experts, "routed experts");
  const float* wt = f32(r.weights, "routing weights");
  int64_t M = 0;  // row_of: this call's output row of each owned slot, in (token, slot) order
  std::vector<int64_t> row_of(static_cast<std::size_t>(N * K), -1);
  for (int64_t s = 0; s < N * K; ++s)
    if (ex[s] >= owned.first && ex[s] < owned.second) row_of[s] = M++;
  Tensor out = new_f32({M, D});
  std::vector<float> ws, ys;
  std::vector<int64_t> slots;
  for (int64_t e = owned.first; e < owned.second; ++e) {
    slots_of(ex, wt, N, K, e, slots, ws);
    if (slots.empty()) continue;
    expert_terms(pool(), experts[e], e, f32(x, "moe input"), slots, ws, K, D, p, order(kLinear), ys);
    for (std::size_t i = 0; i < slots.size(); ++i)
      std::memcpy(f32(out) + row_of[slots[i]] * D, &ys[i * D], static_cast<std::size_t>(D) * sizeof(float));
  }
  return out;
}

Tensor CpuBackend::moe_combine(const Tensor& x, const Routing& r, const Tensor& terms, const SwiGluWeights& shared,
                               const MoeParams& p) {
  const MoeDims d = check_moe(x, r, shared);
  const int64_t N = d.N, D = d.D, K = d.K;
  if (terms.rank() != 2 || terms.dim(0) != N * K || terms.dim(1) != D)
    fail("moe_combine: terms {} must be [N * K = {}, D = {}]", terms.shape_str(), N * K, D);
  const int32_t* ex = i32(r.experts, "routed experts");
  const float* tp = f32(terms, "expert terms");
  std::vector<float> acc(static_cast<std::size_t>(N * D), 0.f);
  std::vector<int64_t> by_expert(static_cast<std::size_t>(K));
  for (int64_t n = 0; n < N; ++n) {  // moe()'s order: by expert id, then slot
    std::iota(by_expert.begin(), by_expert.end(), n * K);
    std::stable_sort(by_expert.begin(), by_expert.end(), [&](int64_t a, int64_t b) { return ex[a] < ex[b]; });
    for (int64_t s : by_expert) accumulate(&acc[n * D], tp + s * D, D, p);
  }
  return add_shared(pool(), acc, f32(x, "moe input"), shared, d.shared_I, N, D, p, order(kLinear), new_f32({N, D}));
}

}  // namespace plumb::cpu
