// With the reduction order "cpu" (GpuBackend::set_cpu_order, PLUMB_GPU_ORDER=cpu) the GPU ops
// whose long sums otherwise run in a parallel order (linear in every format and option, rms_norm,
// the mHC mixes, the router gate) must give results bitwise equal to the CPU backend's, on random
// inputs of real and odd sizes. That is what lets `plumb verify` demand identical whole forwards.
// Harness: gpu_test_util.h (fresh seed, poisoned outputs, skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"

namespace plumb::test {
namespace {

using backend::ElemType;
using backend::LinearOpts;
using backend::NormMath;

TEST_F(GpuCpuOrder, LinearEveryFormatAndOption) {
  struct Case {
    int64_t N, R, K, G;
    const char* what;
  };
  const Case cases[] = {
      {1, 1024, 4096, 1, "decode row"},
      {9, 512, 4096, 1, "prefill rows (GEMM sizes)"},
      {3, 2 * 256, 1024, 2, "grouped"},
      {5, 37, 202, 1, "K with a tail after the blocks of 8"},
      {2, 3, 6, 1, "K below one block of 8"},
  };
  for (const Case& c : cases) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.R * c.G * c.K, 0.05f), x = rnd(c.N * Kx);
    for (const FormatWeight& fw : every_format(c.G * c.R, c.K, wv, rng)) {
      const std::string& fname = fw.name;
      const WeightView view = fw.view();
      for (bool act : {false, true})
        for (bool bw : {false, true})
          for (Round r : {Round::None, Round::BF16}) {
            LinearOpts o{c.G, act, r};
            o.bf16_weight = bw;
            check_bitwise(std::string(c.what) + ": " + fname + (act ? " act_fp8" : "") + (bw ? " bf16 weight" : "") +
                              (r == Round::BF16 ? " bf16" : ""),
                          [&](Backend& be) { return be.linear(up(be, x, {c.N, Kx}), view, o); });
          }
    }
  }
}

TEST_F(GpuCpuOrder, RmsNorm) {
  for (const Shape& s : {Shape{1, 4096}, Shape{6, 1024}, Shape{3, 8, 130}, Shape{4, 5}, Shape{2, 8192}, Shape{1, 9000}}) {
    const int64_t D = s.back(), n = backend::element_count(s);
    const std::vector<float> x = rnd(n, 2.f);
    std::vector<float> wv = rnd(D, 0.1f), xb = x;
    for (float& v : wv) v += 1.f;
    for (float& v : xb) v = bf16(v);
    const OwnedWeight w = bf16_weight({D}, wv), wf = f32_weight({D}, wv);
    const WeightView view = w.view(), fview = wf.view();
    const std::string shape = Tensor(nullptr, ElemType::F32, s).shape_str();
    for (Round r : {Round::None, Round::BF16}) {
      check_bitwise("rms_norm weighted " + shape, [&](Backend& be) {
        return be.rms_norm(up(be, x, s), &view, 1e-6f, NormMath::F32, r);
      });
      check_bitwise("rms_norm f32 weight " + shape, [&](Backend& be) {
        return be.rms_norm(up(be, x, s), &fview, 1e-6f, NormMath::F32, r);
      });
      check_bitwise("rms_norm plain " + shape,
                    [&](Backend& be) { return be.rms_norm(up(be, x, s), nullptr, 1e-6f, NormMath::F32, r); });
    }
    check_bitwise("rms_norm bf16 steps " + shape, [&](Backend& be) {
      return be.rms_norm(up(be, xb, s), nullptr, 1e-6f, NormMath::BF16Steps, Round::BF16);
    });
  }
}

TEST_F(GpuCpuOrder, HcPreAndHead) {
  // {N, D, hc}: V4-Flash's 4 streams, and 2, 3 and 5 (n_out = 35, the kernels' largest) for the
  // per-output tail and the one-warp Sinkhorn at other matrix sizes.
  for (const auto& [N, D, hc] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 4096, 4}, {4, 4096, 4}, {3, 13, 4}, {2, 200, 4}, {2, 4096, 2}, {3, 1000, 3}, {2, 1500, 5}}) {
    const HcWeights w(*this, D, hc);
    const int64_t W = hc * D;
    const backend::HcParams &site = w.site, &head = w.head;
    const std::vector<float> X = rnd(N * W);
    const std::string sh = " N=" + std::to_string(N) + " D=" + std::to_string(D) + " hc=" + std::to_string(hc);
    for (Round r : {Round::None, Round::BF16}) {
      const backend::HcPreResult g = gpu->hc_pre(up(*gpu, X, {N, hc, D}), site, r),
                                 c = cpu->hc_pre(up(*cpu, X, {N, hc, D}), site, r);
      expect_bitwise("hc_pre y" + sh, host(*gpu, g.y), host(*cpu, c.y));
      expect_bitwise("hc_pre post" + sh, host(*gpu, g.post), host(*cpu, c.post));
      expect_bitwise("hc_pre comb" + sh, host(*gpu, g.comb), host(*cpu, c.comb));
      check_bitwise("hc_head" + sh, [&](Backend& be) { return be.hc_head(up(be, X, {N, hc, D}), head, r); });
    }
  }
}

// Random f32 logits (no exact-value trick): with the gate summed in the CPU's order the selection
// and the weights agree exactly even where logits nearly tie. V4 (sqrt-softplus; and its hash
// layers, whose experts come from tid2eid and whose weights are still the scores') and V3
// (sigmoid, groups, the release's bf16 gate).
TEST_F(GpuCpuOrder, RouteGate) {
  struct Case {
    int64_t N, D, E, K, G, TG;
    bool v3, hash;
  };
  for (const Case& c : {Case{7, 4096, 256, 6, 1, 1, false, false}, Case{5, 200, 16, 4, 1, 1, false, false},
                        Case{6, 4096, 256, 6, 1, 1, false, true}, Case{6, 4096, 256, 8, 8, 4, true, false},
                        Case{9, 144, 16, 4, 4, 2, true, false}}) {
    const auto [N, D, E, K, G, TG, v3, hash] = c;
    const std::vector<float> x = rnd(N * D), gw = rnd(E * D, 0.3f), bias = rnd(E, 0.3f);
    const OwnedWeight gate = bf16_weight({E, D}, gw), bw = f32_weight({E}, bias);
    const WeightView gv = gate.view(), bv = bw.view();
    backend::RouteParams p;
    p.gate = &gv;
    p.bias = &bv;
    p.top_k = K;
    p.route_scale = v3 ? 2.5f : 1.5f;
    p.scoring = v3 ? backend::Scoring::Sigmoid : backend::Scoring::SqrtSoftplus;
    p.n_group = G;
    p.topk_group = TG;
    p.round = v3 ? Round::BF16 : Round::None;
    // tid2eid as the checkpoint stores it: int64 [vocab, K], each row K distinct experts.
    const int64_t vocab = 50;
    OwnedWeight t2e;
    t2e.dtype = DType::I64;
    t2e.shape = {vocab, K};
    t2e.data.resize(static_cast<std::size_t>(vocab * K * 8));
    for (int64_t v = 0; v < vocab; ++v) {
      std::vector<int64_t> e(static_cast<std::size_t>(E));
      std::iota(e.begin(), e.end(), 0);
      std::shuffle(e.begin(), e.end(), rng);
      std::memcpy(t2e.data.data() + v * K * 8, e.data(), static_cast<std::size_t>(K * 8));
    }
    const WeightView tv = t2e.view();
    if (hash) p.tid2eid = &tv;
    std::vector<int32_t> ids(static_cast<std::size_t>(N), 0);
    for (int32_t& id : ids) id = static_cast<int32_t>(uniform(0, vocab - 1));
    const backend::Routing g = gpu->route(up(*gpu, x, {N, D}), up(*gpu, ids, {N}), p);
    const backend::Routing r = cpu->route(up(*cpu, x, {N, D}), up(*cpu, ids, {N}), p);
    const std::string what = std::string(v3 ? "V3 bf16 " : "") + (hash ? "hash " : "") + "route N=" + std::to_string(N) +
                             " D=" + std::to_string(D) + " E=" + std::to_string(E);
    expect_equal_i32(what + " experts", g.experts, r.experts);
    expect_bitwise(what + " weights", host(*gpu, g.weights), host(*cpu, r.weights));
  }
}

}  // namespace
}  // namespace plumb::test
