// Backend::prefetch on the GPU (GpuBackend::prefetch, kernels/prefetch.cu): a hint that warms L2
// with weights' bytes from a second stream. No value may depend on it: linears of every weight
// format right after a hint on their weights are bitwise those without one. Where the device can
// warm L2 (sm_90 and later), the warmers must have run (a hint that launches nothing cannot pass
// there), one per 8 data and scale ranges; above GpuBackend::kPrefetchRows rows, none.
#include "gpu_test_util.h"
#include "op_weights.h"

namespace plumb::test {
namespace {

TEST_F(GpuOps, PrefetchChangesNoValue) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "the hint is the GPU backend's (PLUMB_GPU_OPS_ON_CPU runs the CPU backend's no-op)";
  const int64_t K = 512, M = 384;
  const std::vector<float> v = rnd(M * K, 0.05f);
  const OwnedWeight weights[] = {f32_weight({M, K}, v), bf16_weight({M, K}, v), fp8_weight(M, K, v), fp4_weight(M, K, v)};
  const char* names[] = {"f32", "bf16", "fp8", "fp4"};
  std::vector<WeightView> views;
  for (const OwnedWeight& w : weights) views.push_back(w.view());
  // 4 weights of 1 or 2 ranges each, twice: 12 ranges, two warmers a hint.
  std::vector<const WeightView*> all;
  for (int rep = 0; rep < 2; ++rep)
    for (const WeightView& w : views) all.push_back(&w);
  for (int64_t N : {1, 5, 65}) {
    const Tensor x = up(*gpu, rnd(N * K), {N, K});
    for (std::size_t i = 0; i < views.size(); ++i) {
      dev->set_prefetch(0);
      const std::vector<float> plain = host(*gpu, gpu->linear(x, views[i], {}));
      dev->set_prefetch(gpu::GpuBackend::kPrefetchBlocks);
      const int64_t before = dev->prefetch_launches();
      gpu->prefetch(all, N);
      const std::vector<float> hinted = host(*gpu, gpu->linear(x, views[i], {}));
      const std::string what = std::string("linear ") + names[i] + " of " + std::to_string(N) + " rows";
      expect_bitwise(what + " after a prefetch hint", hinted, plain);
      const int64_t want = dev->prefetch_available() && N <= gpu::GpuBackend::kPrefetchRows ? 2 : 0;
      EXPECT_EQ(dev->prefetch_launches() - before, want) << ctx(what + ": the warmers the hint ran");
    }
  }
  dev->set_prefetch(0);
  gpu->synchronize();  // a warmer's fault (a bad range) is reported here at the latest
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

}  // namespace
}  // namespace plumb::test
