// Path (f) in passes of 64 x rows (gpu_linear.cpp, PERF.md v42): Auto gives an f32 linear of 65
// to kF32MmaPassesMaxRows rows of a tall weight (a 256-row block a multiprocessor or more: the
// head) to path (f) one 64-row pass after another instead of path (g). Each pass is path (f) on
// its rows alone, so: every row within the f32 tolerance of the CPU (only the order of the sums
// differs); the rows of pass p bitwise a path (f) call on those rows alone (a pass that read
// another pass's x or wrote past its rows shows here); the launches counted (the passes ran,
// path (g) did not); a weight below a block a multiprocessor, and the switch off, keep path (g).
#include <algorithm>
#include <cstring>

#include "gpu_test_util.h"
#include "op_weights.h"

namespace plumb::test {
namespace {

TEST_F(GpuOps, LinearF32MmaPassesForTallWeights) {
#if defined(PLUMB_WITH_CUDA)
  if (!dev) GTEST_SKIP() << "path (f)'s passes are a GpuBackend choice (PLUMB_GPU_OPS_ON_CPU runs no GPU backend)";
  const int64_t K = 32, tall = 256 * static_cast<int64_t>(dev->info().multiprocessors) + 40;
  const OwnedWeight w = bf16_weight({tall, K}, rnd(tall * K, 0.05f));
  const WeightView view = w.view();
  const std::vector<float> x = rnd(130 * K);
  auto rows = [&](int64_t from, int64_t n) {
    const std::vector<float> xn(x.begin() + from * K, x.begin() + (from + n) * K);
    return up(*gpu, xn, {n, K});
  };
  for (const int64_t N : {int64_t{65}, int64_t{130}}) {  // 2 passes (64 + 1), 3 (64 + 64 + 2)
    const int64_t f0 = dev->f32_mma_calls(), g0 = dev->x_parts_calls();
    check("f32 mma passes, " + std::to_string(N) + " rows", f32_tol(K),
          [&](Backend& be) { return be.linear(be.from_host(x.data(), {N, K}), view, {}); });
    const int64_t passes = (N + 63) / 64;
    EXPECT_EQ(dev->f32_mma_calls() - f0, passes) << ctx("path (f)'s passes at " + std::to_string(N) + " rows");
    EXPECT_EQ(dev->x_parts_calls(), g0) << ctx("path (g) ran at " + std::to_string(N) + " rows");
    const std::vector<float> all = host(*gpu, gpu->linear(rows(0, N), view, {}));
    ASSERT_TRUE(set_path(TestLinearPath::F32Mma));  // (Auto gives 1 or 2 rows the GEMV)
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t n = std::min<int64_t>(64, N - 64 * p);
      const std::vector<float> alone = host(*gpu, gpu->linear(rows(64 * p, n), view, {}));
      EXPECT_EQ(std::memcmp(all.data() + 64 * p * tall, alone.data(), alone.size() * sizeof(float)), 0)
          << ctx("pass " + std::to_string(p) + " of " + std::to_string(N) + " rows differs from its rows alone");
    }
    set_path(TestLinearPath::Auto);
  }
  const int64_t g0 = dev->x_parts_calls();
  const OwnedWeight short_w = bf16_weight({tall - 300, K}, rnd((tall - 300) * K, 0.05f));
  gpu->linear(rows(0, 65), short_w.view(), {});
  EXPECT_EQ(dev->x_parts_calls(), g0 + 1) << ctx("a weight below a block a multiprocessor did not take path (g)");
  dev->set_f32_mma_passes(false);
  gpu->linear(rows(0, 65), view, {});
  EXPECT_EQ(dev->x_parts_calls(), g0 + 2) << ctx("with the passes off, the tall weight did not take path (g)");
  dev->set_f32_mma_passes(true);
#else
  GTEST_SKIP() << "path (f) exists in CUDA builds only";
#endif
}

}  // namespace
}  // namespace plumb::test
