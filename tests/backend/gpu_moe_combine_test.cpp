// The grouped experts' combine kernel (kernels/moe_grouped.cu, grouped_moe_combine) against the
// CPU backend's moe_combine, bitwise: each token's slots summed in (expert id, slot) order, then
// the shared expert, then the output rounding. The CPU-order runs of moe() take the per-expert
// path, and every grouped-path test compares within a tolerance, so only this test sees the
// combine's order (a combine that sums the slots in another order passes all of them).
// Random terms, routing with repeated and out-of-range expert ids, K in the register form (up
// to 8 slots) and the loop form, every option the kernel reads.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "op_weights.h"
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
#include "plumb/backend/gpu/kernels/moe_grouped.h"
#endif

namespace plumb::test {
namespace {

struct CombineCase {
  int64_t N, K, D, E;
};

TEST_F(GpuOps, MoeGroupedCombineIsTheCpuOrderBitwise) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "calls the device kernel itself: no GPU backend under test";
  const CombineCase cases[] = {{5, 6, 64, 16}, {33, 8, 40, 12}, {3, 9, 64, 16}, {4, 12, 24, 40}, {1, 2, 200, 4}};
  const int64_t shared_I = 16;
  for (const CombineCase& c : cases) {
    const int64_t N = c.N, K = c.K, D = c.D, E = c.E;
    // Ids from a small range so tokens repeat experts (the kernel orders equal ids by slot), and
    // about one slot in seven out of range (-1 or past E), which the kernel skips.
    std::vector<int32_t> ex(static_cast<std::size_t>(N * K));
    for (int32_t& e : ex) {
      const int64_t u = uniform(0, 6);
      e = static_cast<int32_t>(u == 0 ? (uniform(0, 1) ? -1 : E + uniform(0, 3)) : uniform(0, std::min<int64_t>(E - 1, K)));
    }
    const std::vector<float> ys = rnd(N * K * D), wt = rnd(N * K, 0.5f), x = rnd(N * D);
    const OwnedWeight w1 = f32_weight({shared_I, D}, rnd(shared_I * D, 0.2f)),
                      w3 = f32_weight({shared_I, D}, rnd(shared_I * D, 0.2f)),
                      w2 = f32_weight({D, shared_I}, rnd(D * shared_I, 0.2f));
    const WeightView v1 = w1.view(), v2 = w2.view(), v3 = w3.view();
    const backend::SwiGluWeights shared{&v1, &v2, &v3};
    const backend::Routing r{up(*cpu, ex, {N, K}), up(*cpu, wt, {N, K})};
    for (bool weight_after : {false, true})
      for (Round acc : {Round::None, Round::BF16})
        for (Round round : {Round::None, Round::BF16}) {
          backend::MoeParams p;
          p.weight_after = weight_after;
          p.accumulate = acc;
          p.round = round;
          // The shared expert's output as the CPU gives it (Round::BF16 rounds its GEMMs too): its
          // combine of all-zero terms, 0 + sh, which the output rounding leaves as it is.
          const std::vector<float> sh = host(
              *cpu, cpu->moe_combine(up(*cpu, x, {N, D}), r, up(*cpu, std::vector<float>(ys.size(), 0.f), {N * K, D}),
                                     shared, p));
          // The CPU's terms: the weighted products the kernel forms with weight_after, zero for the
          // skipped slots (moe_combine adds every slot; the kernel skips them).
          std::vector<float> terms = ys;
          for (int64_t s = 0; s < N * K; ++s)
            for (int64_t d = 0; d < D; ++d) {
              float& t = terms[s * D + d];
              t = ex[s] < 0 || ex[s] >= E ? 0.f : weight_after ? t * wt[s] : t;
            }
          const std::vector<float> want = host(*cpu, cpu->moe_combine(up(*cpu, x, {N, D}), r, up(*cpu, terms, {N * K, D}), shared, p));

          // The kernel's inputs as the GPU backend's tensors, launched on its stream; the output
          // starts as NaN, so an element the kernel does not write differs.
          const Tensor dex = up(*gpu, ex, {N, K}), dwt = up(*gpu, wt, {N, K}), dys = up(*gpu, ys, {N * K, D}),
                       dsh = up(*gpu, sh, {N, D}), dy = up(*gpu, std::vector<float>(N * D, NAN), {N, D});
          gpu::k::GroupedMoeArgs a;
          a.N = N, a.K = K, a.D = D, a.E = E;
          a.experts = gpu::dev_i32(dex);
          a.weights = gpu::dev_f32(dwt);
          a.ys = gpu::dev_f32(dys);
          a.weight_after = weight_after;
          a.accumulate_bf16 = acc == Round::BF16;
          a.round_bf16 = round == Round::BF16;
          ASSERT_EQ(gpu::k::grouped_moe_combine(a, gpu::dev_f32(dsh), gpu::dev_f32(dy), dev->stream()), gpuSuccess);
          expect_bitwise("combine N " + std::to_string(N) + " K " + std::to_string(K) + " D " + std::to_string(D) +
                             " weight_after " + std::to_string(weight_after) + " accumulate " +
                             (acc == Round::BF16 ? "bf16" : "f32") + " round " + (round == Round::BF16 ? "bf16" : "none"),
                         host(*gpu, dy), want);
        }
  }
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

}  // namespace
}  // namespace plumb::test
