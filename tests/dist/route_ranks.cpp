// plumb_route_ranks: run under mpirun (tests/dist/mpi_run.sh). Every rank routes the same tokens
// through gate weights and biases crafted for near-ties (two experts whose selection scores are
// equal or 1 ulp apart), each rank with a different CPU thread count, and the ranks all-gather
// their expert ids and routing weights: every rank must have chosen the same experts and weights,
// bit for bit (issue #18 item 3). Exit 0 when they agree, 1 otherwise (rank 0 says which token).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../backend/op_weights.h"
#include "plumb/backend/backend.h"
#include "plumb/dist/world.h"

namespace {

using plumb::backend::Tensor;

constexpr int64_t kTokens = 96, kDim = 64, kExperts = 16, kTopK = 4;

struct Case {
  std::vector<float> gate, bias, x;
};

// Experts 2i and 2i+1 get the same gate row, so their logits tie; pair i's twin is then set
// apart (main) by nothing (an exact tie: the lower id must win), a bias one ulp higher, or (pair
// i % 3 == 2, here) one gate weight one ulp higher (a logit difference in the last bits).
Case make_case() {
  std::mt19937_64 rng(18);
  Case c;
  c.gate = plumb::test::randn(rng, kExperts * kDim, 0.5f);
  c.bias = plumb::test::randn(rng, kExperts, 0.01f);
  for (int64_t e = 1; e < kExperts; e += 2) {
    std::memcpy(&c.gate[e * kDim], &c.gate[(e - 1) * kDim], kDim * sizeof(float));
    if ((e / 2) % 3 == 2) c.gate[e * kDim + 7] = std::nextafter(c.gate[e * kDim + 7], INFINITY);
  }
  c.x = plumb::test::randn(rng, kTokens * kDim);
  return c;
}

}  // namespace

int main() {
  const auto world = plumb::dist::world();
  const int rank = world->rank();
  auto be = plumb::backend::make_cpu_backend(rank + 1);  // a different thread count per rank
  const Case c = make_case();
  int bad = 0;
  for (int64_t pair = 0; pair < kExperts / 2; ++pair) {
    std::vector<float> bias = c.bias;
    bias[2 * pair] += 4.f;  // the pair on top for every token
    bias[2 * pair + 1] = pair % 3 == 1 ? std::nextafter(bias[2 * pair], INFINITY) : bias[2 * pair];
    const auto gate = plumb::test::f32_weight({kExperts, kDim}, c.gate);
    const auto bw = plumb::test::f32_weight({kExperts}, bias);
    const plumb::WeightView gv = gate.view(), bv = bw.view();
    plumb::backend::RouteParams p;
    p.gate = &gv;
    p.bias = &bv;
    p.top_k = kTopK;
    p.route_scale = 1.5f;
    const Tensor x = be->from_host(c.x.data(), {kTokens, kDim});
    const Tensor ids = be->full(plumb::backend::ElemType::I32, {kTokens}, 0.f);
    const plumb::backend::Routing r = be->route(x, ids, p);
    std::vector<int32_t> ex(kTokens * kTopK);
    std::vector<float> w(ex.size());
    be->to_host(r.experts, ex.data());
    be->to_host(r.weights, w.data());
    const auto all_ex = world->all_gather(std::span<const int32_t>(ex));
    const auto all_w = world->all_gather(std::span<const float>(w));
    for (int other = 1; other < world->size(); ++other)
      for (std::size_t i = 0; i < ex.size(); ++i) {
        const std::size_t j = static_cast<std::size_t>(other) * ex.size() + i;
        if (all_ex[i] != all_ex[j] || std::memcmp(&all_w[i], &all_w[j], sizeof(float)) != 0) {
          if (rank == 0 && bad < 5)
            std::fprintf(stderr, "pair %lld token %zu slot %zu: rank 0 chose expert %d (weight %a), rank %d %d (%a)\n",
                         static_cast<long long>(pair), i / kTopK, i % kTopK, all_ex[i], all_w[i], other, all_ex[j],
                         all_w[j]);
          ++bad;
        }
      }
    // The exact tie goes to the lower id on every rank: both twins are chosen (they lead), the lower first.
    if (pair % 3 == 0)
      for (int64_t n = 0; n < kTokens; ++n)
        if (ex[n * kTopK] != 2 * pair || ex[n * kTopK + 1] != 2 * pair + 1) {
          if (rank == 0 && bad < 5)
            std::fprintf(stderr, "pair %lld token %lld: an exact tie chose %d, %d (expected %lld first)\n",
                         static_cast<long long>(pair), static_cast<long long>(n), ex[n * kTopK], ex[n * kTopK + 1],
                         static_cast<long long>(2 * pair));
          ++bad;
        }
  }
  if (rank == 0)
    std::printf("route_ranks: %d ranks, %lld near-tie pairs x %lld tokens: %s\n", world->size(),
                static_cast<long long>(kExperts / 2), static_cast<long long>(kTokens), bad ? "MISMATCH" : "identical");
  return bad ? 1 : 0;
}
