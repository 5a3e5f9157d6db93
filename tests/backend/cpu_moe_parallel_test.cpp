// moe_terms + moe_combine (the expert-parallel form of moe, dist/parallel.h) are bitwise moe():
// all experts at once, and split across two "ranks" (owned halves, the other half's weights
// absent), in every numerics option set the forwards use; routings with unsorted and repeated
// experts per token, so the sum order matters (checked: slot order gives other bits here).
#include <cstring>

#include "op_test_util.h"
#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using backend::Tensor;
using test::host;

class CpuMoeParallel : public test::CpuOpTest<1818> {
 protected:
  static constexpr int64_t N = 29, D = 64, I = 32, E = 8, K = 3;
  std::vector<test::OwnedWeight> own;
  std::vector<WeightView> views;
  std::vector<backend::SwiGluWeights> experts;
  backend::SwiGluWeights shared;
  std::vector<float> x = test::randn(rng, N * D, 2.f);
  std::vector<int32_t> ids;
  std::vector<float> wts;

  void SetUp() override {
    for (int64_t e = 0; e <= E; ++e) {  // E routed + the shared expert; fp8 up/gate, bf16 down
      own.push_back(test::fp8_weight(I, D, test::randn(rng, I * D, 0.3f)));
      own.push_back(test::bf16_weight({D, I}, test::randn(rng, D * I, 0.3f)));
      own.push_back(test::fp8_weight(I, D, test::randn(rng, I * D, 0.3f)));
    }
    for (const auto& w : own) views.push_back(w.view());
    for (int64_t e = 0; e < E; ++e) experts.push_back({&views[3 * e], &views[3 * e + 1], &views[3 * e + 2]});
    shared = {&views[3 * E], &views[3 * E + 1], &views[3 * E + 2]};
    std::uniform_int_distribution<int32_t> pick(0, E - 1);
    std::uniform_real_distribution<float> weight(0.1f, 1.5f);
    for (int64_t s = 0; s < N * K; ++s) ids.push_back(pick(rng)), wts.push_back(weight(rng));
    ids[0] = ids[1] = 5;  // a repeated expert in one token (hash routing may repeat one)
  }
  backend::Routing routing() {
    return {be->from_host(ids.data(), {N, K}), upload(wts, {N, K})};
  }
  static std::vector<backend::MoeParams> option_sets() {
    backend::MoeParams ref;  // V4 reference
    ref.swiglu_limit = 2.f;
    backend::MoeParams v4f = ref;  // V4 faithful
    v4f.act_fp8 = true;
    v4f.round = backend::Round::BF16;
    v4f.clamp_shared = false;
    backend::MoeParams v3f;  // V3 faithful: weight after w2, bf16 accumulation
    v3f.round = backend::Round::BF16;
    v3f.bf16_weight = true;
    v3f.silu_out = backend::Round::BF16;
    v3f.weight_after = true;
    v3f.accumulate = backend::Round::BF16;
    return {ref, v4f, v3f};
  }
};

TEST_F(CpuMoeParallel, AllExpertsAtOnceIsMoe) {
  const backend::Routing r = routing();
  const Tensor xt = upload(x, {N, D});
  for (const backend::MoeParams& p : option_sets()) {
    const std::vector<float> want = host(*be, be->moe(xt, r, experts, shared, p));
    const Tensor terms = be->moe_terms(xt, r, experts, {0, E}, p);
    ASSERT_EQ(terms.shape(), (backend::Shape{N * K, D}));
    const std::vector<float> got = host(*be, be->moe_combine(xt, r, terms, shared, p));
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);

    // The order is what makes it bitwise: the same terms summed by slot give other bits here.
    const std::vector<float> t = host(*be, terms);
    if (p.accumulate == backend::Round::None && !p.weight_after && p.round == backend::Round::None) {
      const std::vector<float> sh = host(*be, be->moe(xt, {be->full(backend::ElemType::I32, {N, 0}, 0.f),
                                                          be->full(backend::ElemType::F32, {N, 0}, 0.f)},
                                                      {}, shared, p));
      int differs = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0.f;
          for (int64_t k = 0; k < K; ++k) acc += t[(n * K + k) * D + d];
          differs += acc + sh[n * D + d] != want[n * D + d];
        }
      EXPECT_GT(differs, 0) << "the data does not tell the slot order from moe()'s";
    }
  }
}

TEST_F(CpuMoeParallel, TwoRanksHalvesGatheredAreMoe) {
  const backend::Routing r = routing();
  const Tensor xt = upload(x, {N, D});
  for (const backend::MoeParams& p : option_sets()) {
    const std::vector<float> want = host(*be, be->moe(xt, r, experts, shared, p));
    std::vector<std::vector<float>> part;  // each "rank" sees only its own experts' weights
    for (int64_t rank = 0; rank < 2; ++rank) {
      std::vector<backend::SwiGluWeights> mine(E);
      for (int64_t e = rank * E / 2; e < (rank + 1) * E / 2; ++e) mine[e] = experts[e];
      part.push_back(host(*be, be->moe_terms(xt, r, mine, {rank * E / 2, (rank + 1) * E / 2}, p)));
    }
    std::vector<float> all(N * K * D);  // each slot from its owner's rows, in slot order
    std::size_t at[2] = {0, 0};
    for (int64_t s = 0; s < N * K; ++s) {
      const int owner = ids[s] / (E / 2);
      std::memcpy(&all[s * D], &part[owner][at[owner]], D * sizeof(float));
      at[owner] += D;
    }
    EXPECT_EQ(at[0] + at[1], all.size());
    const std::vector<float> got = host(*be, be->moe_combine(xt, r, upload(all, {N * K, D}), shared, p));
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  }
}

TEST_F(CpuMoeParallel, BadCallsAreClearErrors) {
  const backend::Routing r = routing();
  const Tensor xt = upload(x, {N, D});
  EXPECT_THROW(be->moe_terms(xt, r, experts, {2, 9}, {}), Error);
  EXPECT_THROW(be->moe_combine(xt, r, upload(x, {N, D}), shared, {}), Error);
  std::vector<backend::SwiGluWeights> none(E);  // an owned expert without weights
  EXPECT_THROW(be->moe_terms(xt, r, none, {0, E}, {}), Error);
}

}  // namespace
}  // namespace plumb
