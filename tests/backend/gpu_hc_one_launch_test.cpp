// The mHC mixes of a decode step in one launch (k::hc_mix_one_launch, GpuBackend::set_hc_one_launch,
// PLUMB_GPU_HC_ONE_LAUNCH=on): hc_pre, hc_head and hc_post_pre (hc_post's streams formed inside the
// launch) against the same backend's separate launches. The one launch runs pass 1's blocks with
// hc_mix's own elements and order and pass 2's code in each token's last block, so the values are
// the same by construction: every check is bitwise.
#include "gpu_test_util.h"

namespace plumb::test {
namespace {

struct HcCase {
  int64_t N, hc, D;
  int launches;  // of hc_post_pre, hc_pre, hc_head: how many k::hc_mix_one_launch takes (the others: separate launches)
};

// V4-Flash's 4 streams of 4,096 at 1 and 3 tokens, wider (7,168: 56 slices, 7 column blocks),
// widths whose slices and column blocks end part-way, 2 and 3 streams (8 and 15 mixes), the most
// tokens it takes; then 64 tokens (hc_mix's 4-token groups), left to the separate launches, and 5
// streams: 35 mixes are too many for it, hc_head's 5 are not (its pass 2 past the 4 streams a
// thread holds in registers).
std::vector<HcCase> hc_cases() {
  return {{1, 4, 4096, 3}, {3, 4, 4096, 3}, {1, 4, 7168, 3}, {2, 4, 1000, 3}, {2, 2, 4096, 3},
          {2, 3, 300, 3},  {63, 4, 512, 3}, {64, 4, 256, 0}, {1, 5, 256, 1}};
}

std::string case_name(const HcCase& c, Round r) {
  return "N " + std::to_string(c.N) + " hc " + std::to_string(c.hc) + " D " + std::to_string(c.D) +
         (r == Round::BF16 ? " bf16" : "");
}

TEST_F(GpuOps, HcOneLaunchIsTheTwoOps) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  for (const HcCase& c : hc_cases()) {
    const HcWeights w(*this, c.D, c.hc);
    const Shape xs{c.N, c.hc, c.D};
    const Tensor X = up(*gpu, rnd(c.N * c.hc * c.D), xs), out = up(*gpu, rnd(c.N * c.D), {c.N, c.D});
    const Tensor post = up(*gpu, rnd(c.N * c.hc, 0.5f), {c.N, c.hc});
    const Tensor comb = up(*gpu, rnd(c.N * c.hc * c.hc, 0.5f), {c.N, c.hc, c.hc});
    for (Round r : {Round::None, Round::BF16}) {
      const std::string what = case_name(c, r);
      set_hc_one_launch(false);
      const Tensor Xn = gpu->hc_post(out, X, post, comb, r);
      const backend::HcPreResult ref = gpu->hc_pre(Xn, w.site, r);
      const std::vector<float> xn = host(*gpu, Xn), y = host(*gpu, ref.y), p = host(*gpu, ref.post),
                               cb = host(*gpu, ref.comb), head = host(*gpu, gpu->hc_head(Xn, w.head, r));
      const backend::HcPostPreResult off = gpu->hc_post_pre(out, X, post, comb, w.site, r);
      expect_bitwise(what + ": hc_post_pre switched off: streams", host(*gpu, off.X), xn);
      expect_bitwise(what + ": hc_post_pre switched off: y", host(*gpu, off.pre.y), y);
      const int64_t before = set_hc_one_launch(true);
      for (int round = 0; round < 2; ++round) {  // the second finds the counters zeroed by the first
        const std::string at = what + (round ? " (again)" : "");
        const backend::HcPostPreResult pp = gpu->hc_post_pre(out, X, post, comb, w.site, r);
        expect_bitwise(at + ": hc_post_pre streams", host(*gpu, pp.X), xn);
        expect_bitwise(at + ": hc_post_pre y", host(*gpu, pp.pre.y), y);
        expect_bitwise(at + ": hc_post_pre post", host(*gpu, pp.pre.post), p);
        expect_bitwise(at + ": hc_post_pre comb", host(*gpu, pp.pre.comb), cb);
        const backend::HcPreResult pre = gpu->hc_pre(Xn, w.site, r);
        expect_bitwise(at + ": hc_pre y", host(*gpu, pre.y), y);
        expect_bitwise(at + ": hc_pre post", host(*gpu, pre.post), p);
        expect_bitwise(at + ": hc_pre comb", host(*gpu, pre.comb), cb);
        expect_bitwise(at + ": hc_head", host(*gpu, gpu->hc_head(Xn, w.head, r)), head);
      }
      EXPECT_EQ(set_hc_one_launch(false) - before, 2 * c.launches) << ctx(what + ": one launch");
    }
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

}  // namespace
}  // namespace plumb::test
