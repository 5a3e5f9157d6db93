// Backend::side_begin / side_end / join on the GPU (gpu_lanes.cpp): a side chain on a second
// stream. No value may depend on it: ops issued as a side chain and beside it, and an op after
// the join that reads the side chain's output, are bitwise the same ops on one stream, also with
// the side stream held back (Lanes::Delayed: a spin kernel first on a device, the stream's work
// held until the join on the emulator, where a join that did not order fails this test) and for a
// batch above kSideRows (one stream). While the chains may overlap, a freed block goes to no one
// (DeviceAllocator::hold_frees); after the join it is reused. The engine-level check (every
// layer's chains, every logit) is EngineScheduleGpu.V4FaithfulFastOrderSameWithLanes.
#include "gpu_test_util.h"
#include "op_weights.h"

namespace plumb::test {
namespace {

#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
const void* address_of(const Tensor& t) { return static_cast<gpu::GpuStorage*>(t.storage())->ptr; }
#endif

TEST_F(GpuOps, SideChainChangesNoValue) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "side chains are the GPU backend's (PLUMB_GPU_OPS_ON_CPU runs the CPU backend's no-op)";
  using Lanes = gpu::GpuBackend::Lanes;
  const int64_t K = 512, M = 384;
  const OwnedWeight wa = fp8_weight(M, K, rnd(M * K, 0.05f)), wb = bf16_weight({M, K}, rnd(M * K, 0.05f));
  auto times = [](std::vector<float> v, float f) {
    for (float& e : v) e *= f;
    return v;
  };
  for (int64_t N : {int64_t{1}, int64_t{5}, gpu::GpuBackend::kSideRows + 1}) {
    for (const Lanes mode : {Lanes::On, Lanes::Delayed, Lanes::Off}) {
      // New x every time: a block the caching allocator hands out again holds the last run's
      // values, which an op reading it too early must not find equal to the answer.
      const std::vector<float> xv = rnd(N * K);
      const Tensor x = up(*gpu, xv, {N, K});
      dev->set_lanes(Lanes::Off);
      const std::vector<float> plain_a = host(*gpu, gpu->linear(x, wa.view(), {1, true}));
      const std::vector<float> plain_b = host(*gpu, gpu->linear(x, wb.view(), {}));
      dev->set_lanes(mode);
      const int64_t before = dev->side_chains();
      Tensor a, a3, b, b2, a6;
      {
        backend::SideChain side(*gpu, N);
        a3 = gpu->scale(x, 3.f, Round::None);
        a = gpu->linear(x, wa.view(), {1, true});
        side.end();
        b = gpu->linear(x, wb.view(), {});
        b2 = gpu->scale(b, 2.f, Round::None);  // a main chain of two ops
        side.join();
        a6 = gpu->scale(a3, 2.f, Round::None);  // after the join: reads the side chain's output
      }
      const std::string what = std::string(mode == Lanes::On ? "on" : mode == Lanes::Off ? "off" : "delayed") +
                               ", " + std::to_string(N) + " rows";
      expect_bitwise("an op after the join of the side chain's output, " + what, host(*gpu, a6), times(xv, 6.f));
      expect_bitwise("the side chain's linear, " + what, host(*gpu, a), plain_a);
      expect_bitwise("the main chain's linear, " + what, host(*gpu, b), plain_b);
      expect_bitwise("the main chain's second op, " + what, host(*gpu, b2), times(plain_b, 2.f));
      const int64_t want = mode != Lanes::Off && N <= gpu::GpuBackend::kSideRows ? 1 : 0;
      EXPECT_EQ(dev->side_chains() - before, want) << ctx("side chains that took the second stream, " + what);
    }
  }
  dev->set_lanes(Lanes::Off);
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

TEST_F(GpuOps, SideChainHoldsFreedBlocksUntilJoin) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "side chains are the GPU backend's";
  dev->set_lanes(gpu::GpuBackend::Lanes::On);
  const Shape shape{3, 1000};  // a size no other tensor of this test has
  Tensor t = gpu->full(backend::ElemType::F32, shape, 1.f);
  const void* freed = address_of(t);
  {
    backend::SideChain side(*gpu, 1);
    const Tensor s = gpu->full(backend::ElemType::F32, shape, 2.f);
    EXPECT_NE(address_of(s), freed) << ctx("a live block handed out");
    side.end();
    t = Tensor();  // the main chain frees a block a main kernel may still read
    const Tensor m = gpu->full(backend::ElemType::F32, shape, 3.f);
    EXPECT_NE(address_of(m), freed) << ctx("a block freed while the chains overlap was reused before the join");
    side.join();
  }
  dev->set_lanes(gpu::GpuBackend::Lanes::Off);
  // s and m are freed after the join: the free list (last in, first out) holds freed, then them.
  std::vector<const void*> after;
  std::vector<Tensor> keep;
  for (int i = 0; i < 3; ++i) {
    keep.push_back(gpu->full(backend::ElemType::F32, shape, 4.f));
    after.push_back(address_of(keep.back()));
  }
  EXPECT_NE(std::find(after.begin(), after.end(), freed), after.end()) << ctx("the held block back after the join");
  EXPECT_THROW(
      {
        backend::SideChain outer(*gpu, 1);
        backend::SideChain inner(*gpu, 1);
      },
      std::exception)
      << ctx("a side chain inside a side chain");
  EXPECT_THROW(gpu->side_end(), std::exception) << ctx("side_end() without side_begin()");
  const std::vector<float> v = host(*gpu, gpu->full(backend::ElemType::F32, shape, 5.f));  // usable after both
  EXPECT_EQ(v.front(), 5.f);
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

}  // namespace
}  // namespace plumb::test
