// hc_pre, then rms_norm of its y (Backend::hc_pre_norm), and hc_head, then rms_norm
// (Backend::hc_head_norm), on the GPU in two launches (k::hc_mix_norm, GpuBackend::set_hc_norm,
// PLUMB_GPU_HC_NORM=on) against the same backend's separate ops.
// The fused launch keeps pass 2's arithmetic and the norm's own element mapping and functions
// (norm_row.h), so every check is bitwise: the normed y, post, comb and the norm's act_fp8 copy,
// with the count of calls that took the two launches (a fused path that never runs cannot pass).
#include "gpu_test_util.h"
#include "op_weights.h"

namespace plumb::test {
namespace {

using backend::NormMath;

struct HcNormCase {
  int64_t N, hc, D;
  int weight;  // 0 none, 1 bf16, 2 f32, 3 fp8 (the fused kernel takes none of an fp8 weight)
  NormMath math;
  Round out;
  bool fused;  // whether k::hc_mix_norm takes it
};

// A decode step's mixes (V4-Flash: 4 streams of 4,096; 1 to 8 rows take the act_fp8 copy, 9 do
// not), a prefill's (70 tokens: pass 1's 4-token groups), 8 values a thread (7,168), a partial
// last thread's columns (1,000), the fewest threads it takes (64: D 160 and 256) and 2 and 3
// streams; then what it leaves to the separate ops on every platform: 5 streams, an FP8 weight.
// (D = 128 gets 32 threads on CUDA, too few for the sums a thread owns, and 64 on wave64.)
std::vector<HcNormCase> hc_norm_cases() {
  const NormMath F32 = NormMath::F32, Steps = NormMath::BF16Steps;
  return {{1, 4, 4096, 1, F32, Round::BF16, true},  {1, 4, 4096, 2, F32, Round::None, true},
          {3, 4, 4096, 0, Steps, Round::BF16, true}, {8, 4, 4096, 1, F32, Round::BF16, true},
          {9, 4, 1000, 2, F32, Round::None, true},   {70, 4, 512, 1, F32, Round::BF16, true},
          {2, 4, 7168, 1, F32, Round::BF16, true},   {2, 2, 256, 0, F32, Round::None, true},
          {2, 3, 160, 1, F32, Round::BF16, true},    {1, 5, 256, 1, F32, Round::None, false},
          {1, 4, 4096, 3, F32, Round::BF16, false}};
}

std::string case_name(const HcNormCase& c) {
  return "N " + std::to_string(c.N) + " hc " + std::to_string(c.hc) + " D " + std::to_string(c.D) + " weight " +
         std::to_string(c.weight) + (c.math == NormMath::BF16Steps ? " bf16 steps" : "") +
         (c.out == Round::BF16 ? " bf16 out" : "");
}

// One case's inputs: the mixes' weights (w.site for hc_pre, w.head for hc_head), the norm's
// weight as the case names it (null: none) and the streams X on the GPU.
struct HcNormInputs {
  HcNormInputs(GpuOps& t, const HcNormCase& c)
      : w(t, c.D, c.hc),
        nw(t.rnd(c.D, 0.1f)),
        views{nw.bf16.view(), nw.f32.view(), nw.fp8.view()},
        weight(c.weight == 0 ? nullptr : &views[c.weight - 1]),
        X(t.up(*t.gpu, t.rnd(c.N * c.hc * c.D), {c.N, c.hc, c.D})) {}
  HcNormInputs(const HcNormInputs&) = delete;  // weight points into views
  HcWeights w;
  NormWeights nw;
  WeightView views[3];
  const WeightView* weight;
  Tensor X;
};

#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
// The normed y with the switch off and on against the separate ops' ref, and the act_fp8 copy.
void expect_normed_same(GpuOps& t, const std::string& what, const Tensor& off, const Tensor& on, const Tensor& ref) {
  Backend& gpu = *t.gpu;
  const std::vector<float> y = host(gpu, ref);
  t.expect_bitwise(what + ": switched off: y", host(gpu, off), y);
  t.expect_bitwise(what + ": y", host(gpu, on), y);
  ASSERT_EQ(act_fp8_copy_of(on).defined(), act_fp8_copy_of(ref).defined())
      << t.ctx(what + ": whether the act_fp8 copy was written");
  if (act_fp8_copy_of(ref).defined())
    t.expect_bitwise(what + ": the act_fp8 copy", host(gpu, act_fp8_copy_of(on)), host(gpu, act_fp8_copy_of(ref)));
}
#endif

TEST_F(GpuOps, HcPreNormIsTheTwoOps) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  for (const HcNormCase& c : hc_norm_cases()) {
    const std::string what = case_name(c);
    const HcNormInputs in(*this, c);
    set_hc_norm(false);
    const backend::HcPreResult h = gpu->hc_pre(in.X, in.w.site, c.out);
    const Tensor ref = gpu->rms_norm(h.y, in.weight, 1e-6f, c.math, c.out);
    const backend::HcPreResult off = gpu->hc_pre_norm(in.X, in.w.site, in.weight, 1e-6f, c.math, c.out);
    const int64_t before = set_hc_norm(true);
    const backend::HcPreResult on = gpu->hc_pre_norm(in.X, in.w.site, in.weight, 1e-6f, c.math, c.out);
    EXPECT_EQ(set_hc_norm(false) - before, c.fused ? 1 : 0) << ctx(what + ": two launches");
    expect_bitwise(what + ": post", host(*gpu, on.post), host(*gpu, h.post));
    expect_bitwise(what + ": comb", host(*gpu, on.comb), host(*gpu, h.comb));
    expect_normed_same(*this, what, off.y, on.y, ref);
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

// The head's form: no post, no comb, hc mixes a token (the same cases; the fused kernel takes
// the same shapes).
TEST_F(GpuOps, HcHeadNormIsTheTwoOps) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  for (const HcNormCase& c : hc_norm_cases()) {
    const std::string what = "head " + case_name(c);
    const HcNormInputs in(*this, c);
    set_hc_norm(false);
    const Tensor ref = gpu->rms_norm(gpu->hc_head(in.X, in.w.head, c.out), in.weight, 1e-6f, c.math, c.out);
    const Tensor off = gpu->hc_head_norm(in.X, in.w.head, in.weight, 1e-6f, c.math, c.out);
    const int64_t before = set_hc_norm(true);
    const Tensor on = gpu->hc_head_norm(in.X, in.w.head, in.weight, 1e-6f, c.math, c.out);
    EXPECT_EQ(set_hc_norm(false) - before, c.fused ? 1 : 0) << ctx(what + ": two launches");
    expect_normed_same(*this, what, off, on, ref);
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

}  // namespace
}  // namespace plumb::test
