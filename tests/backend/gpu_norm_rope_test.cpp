// norm_rope (Backend::norm_rope: rms_norm, then RoPE, then the FP8 round trip of the first columns)
// on the GPU in one launch (GpuBackend::set_norm_rope, PLUMB_GPU_NORM_ROPE=on) against the same
// backend's three separate ops, bitwise; and, with the CPU's reduction order, against the CPU
// backend's three ops, bitwise.
#include "gpu_test_util.h"
#include "op_weights.h"

namespace plumb::test {
namespace {

using backend::NormMath;

// One call's shape and options. vecs: vectors of d values per position row (q: the heads).
struct NormRopeCase {
  const char* name;
  int64_t rows, vecs, d, f, qcols, qblock;
  int weight;  // 0 none, 1 bf16, 2 f32, 3 fp8 (the kernel takes none of an fp8 weight)
  NormMath math;
  Round out;
  bool one_launch;  // whether k::norm_rope takes it (else the three ops run)
};

std::vector<NormRopeCase> norm_rope_cases() {
  const NormMath F32 = NormMath::F32, Steps = NormMath::BF16Steps;
  return {
      // A decode step's kv (faithful: the 448 nope dims take FP8 in 64-blocks) and its compressed
      // entries, the indexer's keys (d 128, no FP8), q (64 heads, bf16 steps, unweighted).
      {"kv faithful", 1, 1, 512, 32, 448, 64, 2, F32, Round::BF16, true},
      {"kv fast", 3, 1, 512, 32, 0, 0, 1, F32, Round::None, true},
      {"kv batch", 32, 1, 512, 32, 448, 64, 1, F32, Round::BF16, true},
      {"index keys", 2, 1, 128, 32, 0, 0, 1, F32, Round::BF16, true},
      {"q faithful", 1, 64, 512, 32, 0, 0, 0, Steps, Round::BF16, true},
      {"q fast", 2, 16, 512, 32, 0, 0, 0, F32, Round::None, true},
      // The kernel's edges: 8 and 4 values a thread at 1,024 threads, rope over the whole vector,
      // a partial last FP8 block, the smallest block (one warp's 32 threads on CUDA).
      {"wide", 2, 1, 8192, 32, 8192 - 64, 128, 2, F32, Round::None, true},
      {"4096", 1, 1, 4096, 64, 4096 - 128, 128, 1, F32, Round::BF16, true},
      {"all rope", 3, 2, 128, 64, 128, 128, 0, F32, Round::None, true},
      {"partial block", 2, 1, 256, 16, 192, 128, 2, F32, Round::None, true},
      {"small", 2, 3, 64, 8, 64, 64, 0, F32, Round::BF16, true},
      // Shapes the kernel leaves to the three ops (the same values through them).
      {"odd d", 2, 1, 99, 16, 0, 0, 1, F32, Round::None, false},
      {"fp8 weight", 1, 1, 512, 32, 448, 64, 3, F32, Round::BF16, false},
      {"quant cols off the warp", 1, 1, 512, 32, 100, 50, 1, F32, Round::None, false},
      {"too wide", 1, 1, 8194, 32, 0, 0, 0, F32, Round::None, false},
  };
}

// x for a case: random, and each 64-block of a row scaled by ~1e-7, ~3e4 or 1 (FP8 scales at the
// amax floor, past e4m3's range, ordinary); bf16 values for the bf16-steps form.
std::vector<float> norm_rope_input(GpuOps& t, const NormRopeCase& c) {
  std::vector<float> x = t.rnd(c.rows * c.vecs * c.d, 2.f);
  for (int64_t b0 = 0; b0 < static_cast<int64_t>(x.size()); b0 += 64) {
    const int64_t kind = t.uniform(0, 7);
    const float f = kind == 0 ? 1e-7f : kind == 1 ? 3e4f : 1.f;
    for (int64_t k = b0; k < std::min<int64_t>(static_cast<int64_t>(x.size()), b0 + 64); ++k) x[k] *= f;
  }
  if (c.math == NormMath::BF16Steps)
    for (float& v : x) v = bf16(v);
  return x;
}

// The three ops on backend `be` (Backend::norm_rope's definition, spelled out).
Tensor three_ops(Backend& be, const Tensor& x, const WeightView* w, const NormRopeCase& c, const Tensor& pos,
                 const Tensor& freq) {
  const Tensor y = be.rope(be.rms_norm(x, w, 1e-6f, c.math, c.out), pos, freq, false, c.out);
  return c.qcols > 0 ? be.quant_fp8(y, c.qcols, c.qblock) : y;
}

struct NormRopeInputs {
  NormRopeInputs(GpuOps& t, const NormRopeCase& c)
      : nw(t.rnd(c.d, 0.1f)), x(norm_rope_input(t, c)), pos(static_cast<std::size_t>(c.rows)),
        freq(static_cast<std::size_t>(c.f)) {
    for (int32_t& p : pos) p = static_cast<int32_t>(t.uniform(0, 1 << 20));
    for (int64_t i = 0; i < c.f; ++i)  // the release's frequencies, base 10,000 over 2f dims
      freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(2 * c.f)));
    views = {nullptr, &vb, &vf, &v8};
  }
  const WeightView* weight(const NormRopeCase& c) const { return views[c.weight]; }
  NormWeights nw;
  WeightView vb = nw.bf16.view(), vf = nw.f32.view(), v8 = nw.fp8.view();
  std::vector<const WeightView*> views;
  std::vector<float> x;
  std::vector<int32_t> pos;
  std::vector<float> freq;
};

std::string case_name(const NormRopeCase& c) {
  return std::string("norm_rope ") + c.name + " rows=" + std::to_string(c.rows) + " vecs=" + std::to_string(c.vecs) +
         " d=" + std::to_string(c.d) + " f=" + std::to_string(c.f) + " qcols=" + std::to_string(c.qcols);
}

// Every case: the one launch (or, where the kernel does not take the shape, the three ops it
// falls back to) bitwise the three ops on the same backend, and the launches counted, so a
// fused path that never runs cannot pass.
TEST_F(GpuOps, NormRopeIsThreeOps) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  for (const NormRopeCase& c : norm_rope_cases()) {
    const NormRopeInputs in(*this, c);
    const std::string what = case_name(c);
    const Tensor x = up(*gpu, in.x, {c.rows, c.vecs, c.d});
    const Tensor pos = gpu->from_host(in.pos.data(), {c.rows});
    const Tensor freq = up(*gpu, in.freq, {c.f});
    const WeightView* w = in.weight(c);
    set_norm_rope(false);
    const std::vector<float> ref = host(*gpu, three_ops(*gpu, x, w, c, pos, freq));
    const std::vector<float> off = host(*gpu, gpu->norm_rope(x, w, 1e-6f, c.math, pos, freq, c.out, c.qcols, c.qblock));
    const int64_t before = set_norm_rope(true);
    const std::vector<float> got = host(*gpu, gpu->norm_rope(x, w, 1e-6f, c.math, pos, freq, c.out, c.qcols, c.qblock));
    EXPECT_EQ(set_norm_rope(false) - before, c.one_launch ? 1 : 0) << ctx(what + ": one launch");
    expect_bitwise(what + ": switch off vs the three ops", off, ref);
    expect_bitwise(what + ": switch on vs the three ops", got, ref);
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

// With the CPU's reduction order the one launch gives the CPU backend's three ops bit for bit
// (its norm sums in index order; RoPE's angles and the FP8 round trips are the CPU's already).
TEST_F(GpuCpuOrder, NormRope) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  set_norm_rope(true);
  for (const NormRopeCase& c : norm_rope_cases()) {
    if (!c.one_launch || c.d > 1024) continue;  // the kernel's shapes; the wide ones are slow in CPU order
    const NormRopeInputs in(*this, c);
    check_bitwise(case_name(c) + " vs the CPU's three ops", [&](Backend& be) {
      const Tensor x = up(be, in.x, {c.rows, c.vecs, c.d});
      const Tensor pos = be.from_host(in.pos.data(), {c.rows});
      const Tensor freq = up(be, in.freq, {c.f});
      const WeightView* w = in.weight(c);
      return &be == gpu.get() ? be.norm_rope(x, w, 1e-6f, c.math, pos, freq, c.out, c.qcols, c.qblock)
                              : three_ops(be, x, w, c, pos, freq);
    });
  }
  EXPECT_GT(set_norm_rope(false), 0) << ctx("norm_rope launches");
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

}  // namespace
}  // namespace plumb::test
