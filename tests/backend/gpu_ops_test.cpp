// GPU backend against the CPU reference, op by op (harness: gpu_test_util.h): memory ops,
// elementwise and norms, linear in every weight format / option / path, RoPE, the simulated
// quantization ops, Hadamard and mHC. Shapes: the real V4-Flash dims plus odd edge sizes (the
// case lists of op_cases.h, shared with plumb_bench --ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "../util/scoped_env.h"
#include "gpu_test_util.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::ElemType;
using backend::LinearOpts;
using backend::NormMath;

TEST_F(GpuOps, FullAndHostRoundTrip) {
  for (const Shape& s : {Shape{1}, Shape{3, 5}, Shape{7, 4, 129}}) {
    check("full f32", 0, [&](Backend& be) { return be.full(ElemType::F32, s, -2.75f); });
    check("full f32 -inf", 0, [&](Backend& be) { return be.full(ElemType::F32, s, -1e30f); });
    expect_equal_i32("full i32", gpu->full(ElemType::I32, s, 7.f), cpu->full(ElemType::I32, s, 7.f));
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    const std::vector<float> v = rnd(n);
    EXPECT_EQ(host(*gpu, up(*gpu, v, s)), v) << ctx("f32 round trip");
    std::vector<int32_t> iv(static_cast<std::size_t>(n));
    for (auto& x : iv) x = static_cast<int32_t>(uniform(INT32_MIN + 1, INT32_MAX));
    EXPECT_EQ(host_i32(*gpu, up(*gpu, iv, s)), iv) << ctx("i32 round trip");
  }
}

TEST_F(GpuOps, CopyRowsIncludingOverlap) {
  const int64_t R = 20, C = 131;
  const std::vector<float> a = rnd(R * C), b = rnd(9 * C);
  struct Case {
    int64_t dst_row, src_row, n;
    bool self;
  };
  for (const Case& c : {Case{3, 1, 5, false}, Case{0, 0, 9, false}, Case{19, 8, 1, false}, Case{2, 0, 12, true},
                        Case{0, 3, 15, true}, Case{5, 5, 4, true}}) {
    check("copy_rows " + std::to_string(c.dst_row) + "<-" + std::to_string(c.src_row) + " x" + std::to_string(c.n) +
              (c.self ? " overlapping" : ""),
          0, [&](Backend& be) {
            Tensor dst = up(be, a, {R, C});
            const Tensor src = c.self ? dst : up(be, b, {9, C});
            be.copy_rows(dst, c.dst_row, src, c.src_row, c.n);
            return dst;
          });
  }
}

TEST_F(GpuOps, EmbedRepeatColumns) {
  // Vocabulary-sized table (V4-Flash: 129280 ids) with a narrower row, and the real row width.
  struct Case {
    int64_t V, D;
    bool f32;
  };
  for (const Case& c : {Case{129280, 128, false}, Case{1000, 4096, false}, Case{33, 7, true}}) {
    const std::vector<float> t = rnd(c.V * c.D);
    const OwnedWeight w = c.f32 ? f32_weight({c.V, c.D}, t) : bf16_weight({c.V, c.D}, t);
    const WeightView wv = w.view();
    std::vector<int32_t> ids = {0, static_cast<int32_t>(c.V - 1)};
    for (int i = 0; i < 9; ++i) ids.push_back(static_cast<int32_t>(uniform(0, c.V - 1)));
    check("embed V=" + std::to_string(c.V), 0, [&](Backend& be) { return be.embed(wv, up(be, ids, {11})); });
    check("embed 1 row", 0, [&](Backend& be) { return be.embed(wv, up(be, std::vector<int32_t>{ids[1]}, {1})); });
    check("embed, host ids given", 0, [&](Backend& be) { return be.embed(wv, up(be, ids, {11}), ids); });
  }
  for (int64_t N : {1, 6}) {
    const std::vector<float> x = rnd(N * 4096);
    check("repeat_rows x4", 0, [&](Backend& be) { return be.repeat_rows(up(be, x, {N, 4096}), 4); });
    check("repeat_rows x1", 0, [&](Backend& be) { return be.repeat_rows(up(be, x, {N, 4096}), 1); });
    check("columns", 0, [&](Backend& be) { return be.columns(up(be, x, {N, 4096}), 448, 64); });
    check("columns odd", 0, [&](Backend& be) { return be.columns(up(be, x, {N * 8, 512}), 3, 509); });
  }
}

TEST_F(GpuOps, RmsNormScaleAdd) {
  for (const Shape& s : norm_shapes()) {
    const int64_t D = s.back(), n = [&] {
      int64_t k = 1;
      for (int64_t d : s) k *= d;
      return k;
    }();
    const std::vector<float> x = rnd(n, 2.f), y = rnd(n), wvals = rnd(D, 0.1f);
    std::vector<float> wv = wvals;
    for (float& v : wv) v += 1.f;
    const OwnedWeight w = bf16_weight({D}, wv);
    const WeightView view = w.view();
    const std::string shape = Tensor(nullptr, ElemType::F32, s).shape_str();
    for (Round r : {Round::None, Round::BF16}) {
      const std::string rs = r == Round::BF16 ? " bf16" : "";
      check("rms_norm weighted " + shape + rs, with_round(f32_tol(D), r),
            [&](Backend& be) { return be.rms_norm(up(be, x, s), &view, 1e-6f, NormMath::F32, r); });
      check("rms_norm plain " + shape + rs, with_round(f32_tol(D), r),
            [&](Backend& be) { return be.rms_norm(up(be, x, s), nullptr, 1e-6f, NormMath::F32, r); });
      check("scale " + shape + rs, with_round(kF32, r),
            [&](Backend& be) { return be.scale(up(be, x, s), 0.0883883f, r); });
      check("add " + shape + rs, with_round(kF32, r),
            [&](Backend& be) { return be.add(up(be, x, s), up(be, y, s), r); });
    }
    // Every step in bf16: a different summation order of bf16-rounded squares moves the mean by
    // up to a bf16 ulp, hence the bf16 tolerance.
    std::vector<float> xb = x;
    for (float& v : xb) v = bf16(v);
    check("rms_norm bf16 steps " + shape, 2 * kBf16Ulp,
          [&](Backend& be) { return be.rms_norm(up(be, xb, s), nullptr, 1e-6f, NormMath::BF16Steps, Round::BF16); });
  }
}

// rms_norm's kernel forms (elementwise.cu): a row's values in registers up to d = 4,096 and up to
// 8,192, wider rows and FP8 weights through memory. In each, a row's bits do not depend on how
// many rows share the call (the threads per row are a function of d only), and the result is the
// CPU's within the f32 tolerance; bf16, f32 and FP8 weights, none, and bf16 steps.
TEST_F(GpuOps, RmsNormRowIndependentOfRows) {
  const int64_t N = 5;
  for (int64_t D : {80, 512, 4096, 5000, 8192, 9000}) {
    const std::vector<float> x = rnd(N * D, 2.f);
    std::vector<float> wv = rnd(D, 0.1f), xb = x;
    for (float& v : wv) v += 1.f;
    for (float& v : xb) v = bf16(v);
    const OwnedWeight wb = bf16_weight({D}, wv), wf = f32_weight({D}, wv), w8 = fp8_weight(1, D, wv);
    const WeightView vb = wb.view(), vf = wf.view(), v8 = w8.view();
    struct Form {
      const char* name;
      const WeightView* w;
      NormMath math;
    };
    for (const Form& f : {Form{"bf16 weight", &vb, NormMath::F32}, Form{"f32 weight", &vf, NormMath::F32},
                          Form{"fp8 weight", &v8, NormMath::F32}, Form{"plain", nullptr, NormMath::F32},
                          Form{"bf16 steps", nullptr, NormMath::BF16Steps}})
      for (Round r : {Round::None, Round::BF16}) {
        if (f.math == NormMath::BF16Steps && r == Round::None) continue;
        const std::vector<float>& in = f.math == NormMath::BF16Steps ? xb : x;
        const std::string what = "rms_norm D=" + std::to_string(D) + " " + f.name + (r == Round::BF16 ? " bf16" : "");
        const std::vector<float> all = host(*gpu, gpu->rms_norm(up(*gpu, in, {N, D}), f.w, 1e-6f, f.math, r));
        for (int64_t n : {1, 2}) {
          const std::vector<float> part(in.begin(), in.begin() + n * D);
          const std::vector<float> got = host(*gpu, gpu->rms_norm(up(*gpu, part, {n, D}), f.w, 1e-6f, f.math, r));
          expect_bitwise(what + ": the first " + std::to_string(n) + " rows alone vs in a call of 5", got,
                         std::vector<float>(all.begin(), all.begin() + n * D));
        }
        check(what + " vs CPU", f.math == NormMath::BF16Steps ? 2 * kBf16Ulp : with_round(f32_tol(D), r),
              [&](Backend& be) { return be.rms_norm(up(be, in, {N, D}), f.w, 1e-6f, f.math, r); });
      }
  }
}

TEST_F(GpuOps, LinearEveryFormatOptionAndPath) {
  const std::vector<LinearCase> cases = linear_cases();
  std::vector<std::string> unavailable;
  for (const LinearCase& c : cases) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.R * c.K, 0.05f), x = rnd(c.N * Kx), xb = rnd_bf16(c.N * Kx);
    for (const FormatWeight& fw : every_format(c.R, c.K, wv, rng)) {
      const std::string& fname = fw.name;
      const WeightView view = fw.view();
      for (TestLinearPath path :
           {TestLinearPath::Auto, TestLinearPath::Gemv, TestLinearPath::Simt, TestLinearPath::Mma}) {
        if (!set_path(path)) {
          if (&c == &cases.front() && fname == "f32") unavailable.push_back(path_name(path));
          continue;
        }
        for (bool exact : {false, true})
          for (bool act : {false, true})
            for (Round r : {Round::None, Round::BF16}) {
              // Tensor-core paths take bf16 operands: exact for bf16-exact (or FP8-quantized)
              // activations, ~1e-2 for arbitrary f32 ones. Auto may choose them.
              // Forced Mma also rounds weights bf16 cannot hold (F32, FP8 with f32 scales) to bf16.
              const bool mma = path == TestLinearPath::Mma || path == TestLinearPath::Auto;
              const bool rounds_weight = path == TestLinearPath::Mma && (fname == "f32" || fname == "fp8 f32-scale");
              const bool rounded_operands = (mma && !exact && !act) || rounds_weight;
              // Rounded operands err by ~2^-8 of sum |x w|, not of |y|: with only a handful of
              // outputs, one cancelling dot product makes max|ref| meaningless as the scale
              // (seen: [1, 1] with |y| 0.04 from terms of 0.4). Those shapes are checked with
              // exact operands only.
              if (rounded_operands && c.N * c.R < 16) continue;
              const double tol = with_round(rounded_operands ? kBf16Mma : f32_tol(c.K), r);
              const std::string what = std::string(c.what) + ": " + fname + " path " + path_name(path) +
                                       (exact ? " bf16-exact x" : " f32 x") + (act ? " act_fp8" : "") +
                                       (r == Round::BF16 ? " out bf16" : "");
              check(what, tol, [&](Backend& be) {
                return be.linear(up(be, exact ? xb : x, {c.N, Kx}), view, LinearOpts{c.G, act, r});
              });
            }
      }
      set_path(TestLinearPath::Auto);
    }
  }
  // Leading dims are kept: [N, H, K] -> [N, H, R].
  const std::vector<float> x3 = rnd(2 * 3 * 96), w3 = rnd(40 * 96, 0.1f);
  const OwnedWeight w = bf16_weight({40, 96}, w3);
  const WeightView v = w.view();
  check("linear 3-d input", kBf16Mma, [&](Backend& be) { return be.linear(up(be, x3, {2, 3, 96}), v, {}); });
  if (!unavailable.empty()) {
    std::string s;
    for (const auto& p : unavailable) s += " " + p;
    std::cout << "[ NOTE ] linear paths not selectable in this build (only auto tested):" << s << "\n";
  }
}

// LinearOpts::bf16_weight (the V3 release's weight_dequant to bf16) on every path: the decoded
// weight is rounded to bf16 on both sides, so with bf16-exact activations every product is exact
// and only the summation order differs.
TEST_F(GpuOps, LinearBf16WeightEveryPath) {
  for (const LinearCase& c : linear_bf16_weight_cases()) {
    const int64_t N = c.N, R = c.R, K = c.K;
    const std::vector<float> wv = rnd(R * K, 0.05f), xb = rnd_bf16(N * K);
    for (const FormatWeight& fw : every_format(R, K, wv, rng)) {
      const std::string& fname = fw.name;
      const WeightView view = fw.view();
      for (TestLinearPath path :
           {TestLinearPath::Auto, TestLinearPath::Gemv, TestLinearPath::Simt, TestLinearPath::Mma}) {
        if (!set_path(path)) continue;
        for (Round r : {Round::None, Round::BF16}) {
          LinearOpts o{1, false, r};
          o.bf16_weight = true;
          check("bf16 weight " + fname + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " path " +
                    path_name(path) + (r == Round::BF16 ? " out bf16" : ""),
                with_round(f32_tol(K), r), [&](Backend& be) { return be.linear(up(be, xb, {N, K}), view, o); });
        }
      }
      set_path(TestLinearPath::Auto);
    }
  }
}

// The GEMV (decode) path gives each output row the same bits whatever the number of x rows in
// the call: a sequence's decode step must not depend on its batch (issue 15's batched == alone
// property, in the fast order too). 17 rows are 3 launches (8 + 8 + 1), so row 8 is summed by an
// 8-row launch in the call of 17 and by a 1-row launch in the call of 9. Shapes cover split-K
// (rows too few to fill the device: a row summed by 2 to 8 warps), 4 rows per warp (the last
// warp's rows past R at 1030), 1 row per warp, grouped weights, K = 8192 and K with a partial
// segment; with and without act_fp8 and bf16 weight rounding.
TEST_F(GpuOps, GemvRowsIndependentOfBatch) {
  if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
  struct Case {
    int64_t R, K, G;
  };
  for (const Case& c : {Case{4096, 4096, 1}, Case{1024, 4096, 1}, Case{32768, 1024, 1}, Case{1024, 4096, 2},
                        Case{300, 1000, 1}, Case{512, 4096, 1}, Case{1030, 4096, 1}, Case{128, 1024, 8},
                        Case{1024, 8192, 1}}) {
    const int64_t Kx = c.G * c.K, N = 17;
    const std::vector<float> wv = rnd(c.G * c.R * c.K, 0.05f), x = rnd(N * Kx);
    for (const FormatWeight& fw : every_format(c.G * c.R, c.K, wv, rng)) {
      const WeightView view = fw.view();
      for (bool act : {false, true})
        for (bool rw : {false, true}) {
          LinearOpts o{c.G, act, Round::None};
          o.bf16_weight = rw;
          const std::vector<float> all = host(*gpu, gpu->linear(up(*gpu, x, {N, Kx}), view, o));
          for (int64_t n : {1, 2, 3, 5, 8, 9}) {
            const std::vector<float> xs(x.begin(), x.begin() + n * Kx);
            const std::vector<float> part = host(*gpu, gpu->linear(up(*gpu, xs, {n, Kx}), view, o));
            const int64_t out = c.G * c.R;
            ASSERT_EQ(part.size(), static_cast<std::size_t>(n * out));
            EXPECT_EQ(std::memcmp(part.data(), all.data(), part.size() * sizeof(float)), 0)
                << ctx("R=" + std::to_string(c.R) + " K=" + std::to_string(c.K) + " G=" + std::to_string(c.G) + " " +
                       fw.name + (act ? " act_fp8" : "") + (rw ? " bf16 weight" : "") + ": the first " +
                       std::to_string(n) + " rows alone differ from the same rows in a call of 17");
          }
        }
    }
  }
  set_path(TestLinearPath::Auto);
}

// The GEMV's shapes against the CPU, every format, with and without bf16 weight rounding and bf16
// output: 4 or 1 rows per warp, split-K from 1 to 8 (partials added in shared memory), the last
// warp's rows past R, a split ending in a partial segment (f32 / bf16: 16-byte loads then the
// element path; FP8 / FP4 at K % 16 != 0: the element path), 8 groups, and x rows in several
// launches of 8 (N = 9, 17) or in one of 2, 3 or 4 (the 2- and 4-row kernels). The splits named
// are the H200's (132 SMs); other devices take other splits of the same shapes.
TEST_F(GpuOps, GemvShapesEveryFormat) {
  if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
  const LinearCase cases[] = {
      {2, 1030, 4096, 1, "4 rows a warp, split 8, the last warp's rows past R"},
      {9, 512, 4096, 1, "1 row a warp, split 4; 8 + 1 x rows"},
      {2, 300, 1000, 1, "1 row a warp, split 2 ending in a partial segment"},
      {17, 8 * 128, 1024, 8, "8 groups, split 2; 8 + 8 + 1 x rows"},
      {1, 1024, 8192, 1, "K = 8192, split 8"},
      {3, 8192, 1024, 1, "4 rows a warp, no split, 3 x rows in the 4-row kernel"},
      {4, 256, 4096, 1, "1 row a warp, split 8, 4 x rows"},
  };
  for (const LinearCase& c : cases) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.R * c.K, 0.05f), x = rnd(c.N * Kx);
    for (const FormatWeight& fw : every_format(c.R, c.K, wv, rng)) {
      const WeightView view = fw.view();
      for (bool rw : {false, true})
        for (Round r : {Round::None, Round::BF16}) {
          LinearOpts o{c.G, false, r};
          o.bf16_weight = rw;
          check(c.name() + ": " + fw.name + (rw ? " bf16 weight" : "") + (r == Round::BF16 ? " out bf16" : ""),
                with_round(f32_tol(c.K), r), [&](Backend& be) { return be.linear(up(be, x, {c.N, Kx}), view, o); });
        }
    }
  }
  set_path(TestLinearPath::Auto);
}

// act_fp8 on the GEMV (decode): the kernel applies the FP8 round trip to x itself as it stages x
// in shared memory (LinearArgs::quant_x) where the separate form first writes a quantized copy
// (quant_blocks) that the GEMV reads. The same products and sums, so bitwise the same result:
// checked against the backend with the fused form off and against quant_fp8 then a plain linear,
// every format, on N = 1, 3, 8 and 17 x rows (the 1-, 4- and 8-row kernels; 8 + 8 + 1 launches),
// shapes with split-K, 8 groups, K = 8192, K with a partial 128-block and a partial segment (FP8 /
// FP4: the element path), and x blocks whose amax lies below the 1e-4 floor or far above 448.
// Shapes whose x rows do not fit the kernel's shared memory (K = 8192 at N >= 2 on CUDA) take
// the separate form and must agree as well. Small shapes are also checked against the CPU.
TEST_F(GpuOps, GemvActQuantFusedBitwise) {
  if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
  struct Case {
    int64_t R, K, G;
    bool cpu;
  };
  for (const Case& c : {Case{1024, 4096, 1, false}, Case{512, 8192, 1, false}, Case{2048, 2048, 1, false},
                        Case{4096, 1024, 1, false}, Case{128, 1024, 8, true}, Case{300, 1000, 1, true},
                        Case{96, 260, 1, true}}) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.G * c.R * c.K, 0.05f);
    const std::vector<FormatWeight> formats = every_format(c.G * c.R, c.K, wv, rng);
    for (int64_t N : {1, 3, 8, 17}) {
      std::vector<float> x = rnd(N * Kx);
      // Per 128-block magnitudes (blocks of each row's groups): mostly ~1, some under the amax
      // floor, some far above e4m3's range.
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < c.G; ++g)
          for (int64_t b0 = 0; b0 < c.K; b0 += 128) {
            const int64_t kind = uniform(0, 7);
            const float f = kind == 0 ? 1e-7f : kind == 1 ? 3e4f : 1.f;
            for (int64_t k = b0; k < std::min(c.K, b0 + 128); ++k) x[n * Kx + g * c.K + k] *= f;
          }
      for (const FormatWeight& fw : formats) {
        const WeightView view = fw.view();
        const std::string what = "R=" + std::to_string(c.R) + " K=" + std::to_string(c.K) + " G=" +
                                 std::to_string(c.G) + " N=" + std::to_string(N) + " " + fw.name + " act_fp8";
        const LinearOpts act{c.G, true, Round::None}, plain{c.G, false, Round::None};
        set_fused_act_quant(true);
        const std::vector<float> fused = host(*gpu, gpu->linear(up(*gpu, x, {N, Kx}), view, act));
        set_fused_act_quant(false);
        const std::vector<float> separate = host(*gpu, gpu->linear(up(*gpu, x, {N, Kx}), view, act));
        set_fused_act_quant(true);
        const Tensor xq = gpu->quant_fp8(up(*gpu, x, {N * c.G, c.K}), c.K, 128).reshaped({N, Kx});
        const std::vector<float> manual = host(*gpu, gpu->linear(xq, view, plain));
        expect_bitwise(what + ": fused vs separate act-quant", fused, separate);
        expect_bitwise(what + ": fused vs quant_fp8 then linear", fused, manual);
        if (c.cpu)
          check(what + " vs CPU", f32_tol(c.K), [&](Backend& be) { return be.linear(up(be, x, {N, Kx}), view, act); });
      }
    }
  }
  set_path(TestLinearPath::Auto);
}

// PLUMB_GPU_FP8_DECODE for a scope: the GEMV's FP8 decode by the hardware conversion (hw: CUDA
// sm_89+; elsewhere the kernel decodes by integers anyway) or by the integer decode ("int").
// The backend reads it at each call.
ScopedEnv fp8_decode(bool hw) { return ScopedEnv("PLUMB_GPU_FP8_DECODE", hw ? nullptr : "int"); }

// Equal floats (+0 and -0 alike: a GEMV sum starts at +0) or both NaN (any payload).
inline bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The GEMV's FP8 decode, code by code: all 256 e4m3 codes at every position of a 16-byte segment,
// under ue8m0 scales 2^-127 (the subnormal scale) .. 2^127 and the NaN scale (ue8m0 code 255), and
// f32 scales (negative, subnormal, huge, +-inf, NaN, 0), read out through the GEMV one column at a
// time: x row j is one-hot at column j, so output (j, r) is w[r][j] itself (the other products are
// +-0), or NaN when row r holds a NaN or an infinite weight (NaN * 0, inf * 0). Expected: the CPU's
// decode, codecs.h's e4m3_to_f32(code) * scale (weight_at). Both decodes (the hardware conversion
// where there is one, and the integer decode with its slow path for NaN codes and scales >= 2^8)
// must give it, and the same bits as each other; through the 1-, 2-, 4- and 8-row kernels, R =
// 1,664 (1 row a warp on the H200) and 8,192 (4 rows a warp). Rows come in groups of 256 (two
// 128-row scale blocks): row r of a group holds code list[(r + c) % n] at column c (list: the 254
// non-NaN codes, or under a scale that would overflow at 448, the n = 128 codes below 2 in
// magnitude), so every column sees every code; in every seventh group, rows 0..127 each hold one
// NaN code (0x7F or 0xFF).
TEST_F(GpuOps, GemvFp8DecodeEveryCode) {
  if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
  constexpr int64_t K = 256;
  std::vector<uint8_t> codes, small;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));
    if ((c & 0x7F) < 0x40) small.push_back(static_cast<uint8_t>(c));  // |value| < 2
  }
  ASSERT_EQ(codes.size(), 254u);
  ASSERT_EQ(small.size(), 128u);
  // Scale lists, in pairs (a 256-row group's two column blocks); the pairs that would overflow
  // at 448 last: ue8m0 2^-127 (code 0, the subnormal scale) .. 2^127, the integer decode's slow
  // path from 2^8 (135) on, NaN (255); f32 negative, subnormal, non-powers of two, 0, NaN, +-inf.
  constexpr int kScales = 14;
  const uint8_t ue[kScales] = {0, 1, 100, 120, 127, 134, 135, 136, 200, 255, 247, 254, 127, 127};
  const float fs[kScales] = {1.f,   -1.5f,  0x1p-140f, 3.0e-39f,  0.7f * 0x1p-10f, 1.3e30f,  0x1p8f,
                             0.f, -2.5e-20f, NAN,       0x1p120f, 3.0e38f,        INFINITY, -INFINITY};
  std::vector<float> eye(K * K, 0.f);
  for (int64_t j = 0; j < K; ++j) eye[j * K + j] = 1.f;
  // Scale block (rb, cb): entry (2 * (rb / 2) + cb) % kScales of a list (K / 128 = 2 blocks a row).
  const auto pick = [&](int64_t rb, int64_t cb) { return (2 * (rb / 2) + cb) % kScales; };
  const auto huge = [&](int64_t e) { return std::fabs(448.f * ue8m0_to_f32(ue[e])) > 3.4e38f || std::fabs(448.f * fs[e]) > 3.4e38f; };
  for (int64_t R : {1664, 8192}) {
    OwnedWeight w;
    w.format = WeightFormat::FP8Block128;
    w.dtype = DType::F8_E4M3;
    w.shape = {R, K};
    w.scale_shape = {(R + 127) / 128, K / 128};
    w.data.resize(R * K);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < K; ++c) {
        const int64_t i = r % 256, grp = r / 256;
        const bool h = huge(pick(r / 128, 0)) || huge(pick(r / 128, 1));
        uint8_t code = h ? small[(i + c) % 128] : codes[(i + c) % 254];
        if (grp % 7 == 6 && i < 128 && c == i) code = i % 2 ? 0xFF : 0x7F;
        w.data[r * K + c] = code;
      }
    const int64_t nsc = w.scale_shape[0] * w.scale_shape[1];
    std::vector<uint8_t> ue_sc(nsc), f32_sc(4 * nsc);
    for (int64_t b = 0; b < nsc; ++b) {
      ue_sc[b] = ue[pick(b / 2, b % 2)];
      std::memcpy(f32_sc.data() + 4 * b, &fs[pick(b / 2, b % 2)], 4);
    }
    for (bool f32 : {false, true}) {
      w.scale = f32 ? f32_sc : ue_sc;
      const WeightView view = f32 ? f32_scaled_view(w) : w.view();
      // Expected: row r's output for x row j (weight_at on the CPU; NaN if the row is not finite).
      std::vector<float> expect(K * R);
      for (int64_t r = 0; r < R; ++r) {
        bool finite = true;
        std::vector<float> row(K);
        for (int64_t c = 0; c < K; ++c) {
          const int64_t b = (r / 128) * (K / 128) + c / 128;
          float s;
          if (f32)
            std::memcpy(&s, f32_sc.data() + 4 * b, 4);
          else
            s = ue8m0_to_f32(ue_sc[b]);
          row[c] = e4m3_to_f32(w.data[r * K + c]) * s;
          finite = finite && std::isfinite(row[c]);
        }
        for (int64_t j = 0; j < K; ++j) expect[j * R + r] = finite ? row[j] : NAN;
      }
      const std::string wname = std::string(f32 ? "f32 scales" : "ue8m0 scales") + " R=" + std::to_string(R);
      if (R == 1664 && !f32) {  // the test's construction, against the CPU backend's linear
        const std::vector<float> cpu_y = host(*cpu, cpu->linear(up(*cpu, eye, {K, K}), view, LinearOpts{}));
        int64_t bad = 0;
        for (std::size_t i = 0; i < cpu_y.size(); ++i) bad += !same_value(cpu_y[i], expect[i]);
        EXPECT_EQ(bad, 0) << ctx(wname + ": the CPU backend's one-hot outputs are not the decoded weights");
      }
      std::vector<float> by_decode[2];
      for (bool hw : {true, false}) {
        const ScopedEnv scope = fp8_decode(hw);
        std::vector<float>& got = by_decode[hw];
        got.assign(K * R, -1.f);
        for (int64_t n : {1, 2, 4, 8}) {
          int64_t bad = 0, first = -1;
          for (int64_t j0 = 0; j0 < K; j0 += n) {
            const std::vector<float> xs(eye.begin() + j0 * K, eye.begin() + (j0 + n) * K);
            const std::vector<float> y = host(*gpu, gpu->linear(up(*gpu, xs, {n, K}), view, LinearOpts{}));
            ASSERT_EQ(y.size(), static_cast<std::size_t>(n * R));
            for (int64_t i = 0; i < n * R; ++i) {
              if (!same_value(y[i], expect[j0 * R + i]) && bad++ == 0) first = j0 * R + i;
              got[j0 * R + i] = y[i];
            }
          }
          if (bad == 0) continue;
          char detail[160];
          std::snprintf(detail, sizeof detail, "first at x row %ld, weight row %ld (code 0x%02x): got %a, expected %a",
                        static_cast<long>(first / R), static_cast<long>(first % R),
                        w.data[(first % R) * K + first / R], got[first], expect[first]);
          ADD_FAILURE() << ctx(wname + (hw ? ", hardware decode" : ", integer decode") + ", " + std::to_string(n) +
                               " x rows a call: " + std::to_string(bad) + " outputs differ from the CPU's decode, " +
                               detail);
        }
      }
      int64_t differ = 0;
      for (int64_t i = 0; i < K * R; ++i)
        differ += !(std::isnan(by_decode[0][i]) && std::isnan(by_decode[1][i])) &&
                  std::memcmp(&by_decode[0][i], &by_decode[1][i], 4) != 0;
      EXPECT_EQ(differ, 0) << ctx(wname + ": the hardware and the integer decode differ in " + std::to_string(differ) +
                                  " outputs");
    }
  }
  set_path(TestLinearPath::Auto);
}

// The FP8 / FP4 GEMV against the CPU at the shapes that stress its tiling: many blocks (R =
// 32,772 at K = 1,024: wq_b's shape plus 4 rows), the last tile partial (R not a multiple of a
// tile's rows), K = 1,024 / 4,096 / 7,168 (7,168: 14 warp steps, so split-K with a short last split,
// and for R = 333 an empty one), 8 groups of 130 rows; random non-zero weights and x, N = 1, 2, 5,
// 8 (the 1-row kernel's lean form and the 2-, 4- and 8-row kernels), with and without act_fp8 (x
// staged and quantized by the kernel while its first loads are out); FP8 with both decodes, which
// must agree bitwise.
TEST_F(GpuOps, GemvShapes) {
  if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
  struct Case {
    int64_t R, K, G;
    bool all_formats;
  };
  for (const Case& c : {Case{4100, 1024, 1, true}, Case{32772, 1024, 1, false}, Case{1030, 4096, 1, true},
                        Case{2050, 7168, 1, true}, Case{333, 7168, 1, true}, Case{130, 1024, 8, true}}) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.G * c.R * c.K, 0.05f);
    std::vector<FormatWeight> formats;
    formats.push_back({"fp8", fp8_weight(c.G * c.R, c.K, wv)});
    if (c.all_formats) {
      formats.push_back({"fp8 f32-scale", fp8_weight_f32_scales(c.G * c.R, c.K, wv, rng)});
      formats.push_back({"fp4", fp4_weight(c.G * c.R, c.K, wv)});
    }
    for (int64_t N : {1, 2, 5, 8}) {
      if (!c.all_formats && N > 2) continue;  // the large shape: its CPU reference is slow
      const std::vector<float> x = rnd(N * Kx);
      for (const FormatWeight& fw : formats) {
        const WeightView view = fw.view();
        for (bool act : {false, true}) {
          const LinearOpts o{c.G, act, Round::None};
          const std::string what = "R=" + std::to_string(c.R) + " K=" + std::to_string(c.K) + " G=" +
                                   std::to_string(c.G) + " N=" + std::to_string(N) + " " + fw.name +
                                   (act ? " act_fp8" : "");
          check(what, f32_tol(c.K), [&](Backend& be) { return be.linear(up(be, x, {N, Kx}), view, o); });
          if (fw.name.rfind("fp8", 0) == 0) {
            std::vector<float> y[2];
            for (bool hw : {false, true}) {
              const ScopedEnv scope = fp8_decode(hw);
              y[hw] = host(*gpu, gpu->linear(up(*gpu, x, {N, Kx}), view, o));
            }
            expect_bitwise(what + ": hardware vs integer FP8 decode", y[1], y[0]);
          }
        }
      }
    }
  }
  set_path(TestLinearPath::Auto);
}

// Path (d): FP8 e4m3 tensor cores (sm_90) for FP8 weights under act_fp8. The products of e4m3
// codes are exact and each 128-wide block's partial sum is scaled in f32, so the result is the
// CPU's up to summation order.
TEST_F(GpuOps, LinearFp8TensorCores) {
#if defined(PLUMB_WITH_CUDA)
  if (!dev || dev->info().arch.rfind("sm_9", 0) != 0)
    GTEST_SKIP() << "the FP8 tensor-core path needs an sm_90 device";
  for (const LinearCase& c : linear_fp8_cases()) {
    const int64_t Kx = c.G * c.K;
    const std::vector<float> wv = rnd(c.R * c.K, 0.05f), x = rnd(c.N * Kx);
    const OwnedWeight ue = fp8_weight(c.R, c.K, wv), f32s = fp8_weight_f32_scales(c.R, c.K, wv, rng);
    for (const auto& [fname, view] : {std::pair<std::string, WeightView>{"fp8 ue8m0", ue.view()},
                                      std::pair<std::string, WeightView>{"fp8 f32-scale", f32_scaled_view(f32s)}})
      for (Round r : {Round::None, Round::BF16}) {
        ASSERT_TRUE(set_path(TestLinearPath::Fp8));
        check(std::string(c.what) + ": " + fname + " path fp8" + (r == Round::BF16 ? " out bf16" : ""),
              with_round(f32_tol(c.K), r),
              [&](Backend& be) { return be.linear(up(be, x, {c.N, Kx}), view, LinearOpts{c.G, true, r}); });
      }
  }
  set_path(TestLinearPath::Auto);
#else
  GTEST_SKIP() << "the FP8 tensor-core path exists in CUDA builds only";
#endif
}

TEST_F(GpuOps, RopeAndInverse) {
  for (const RopeCase& c : rope_cases()) {
    std::vector<float> f(static_cast<std::size_t>(c.F));
    for (int64_t i = 0; i < c.F; ++i) f[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / (2 * c.F)));
    std::vector<int32_t> pos = {0};
    for (int64_t i = 1; i < c.N; ++i) pos.push_back(static_cast<int32_t>(uniform(1, 65535)));
    const std::vector<float> x = rnd(c.N * c.H * c.Dh);
    for (bool inv : {false, true})
      for (Round r : {Round::None, Round::BF16})
        check("rope " + std::to_string(c.N) + "x" + std::to_string(c.H) + "x" + std::to_string(c.Dh) +
                  (inv ? " inverse" : "") + (r == Round::BF16 ? " bf16" : ""),
              with_round(kF32, r), [&](Backend& be) {
                return be.rope(up(be, x, {c.N, c.H, c.Dh}), up(be, pos, {c.N}), up(be, f, {c.F}), inv, r);
              });
  }
}

TEST_F(GpuOps, QuantFp8Fp4Hadamard) {
  // The round trips are deterministic functions of each block: they must agree exactly.
  for (const QuantFp8Case& c : quant_fp8_cases()) {
    std::vector<float> x = rnd(c.N * c.D, 3.f);
    x[0] = 448.f * 1024;  // a large block next to small ones
    check("quant_fp8 " + std::to_string(c.D) + " cols " + std::to_string(c.cols) + " block " + std::to_string(c.block),
          0, [&](Backend& be) {
            return be.quant_fp8(up(be, x, {c.N, c.D}), c.cols, c.block);
          });
  }
  for (const Shape& s : quant_fp4_shapes()) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    const std::vector<float> x = rnd(n, 2.f);
    check("quant_fp4 " + Tensor(nullptr, ElemType::F32, s).shape_str(), 0,
          [&](Backend& be) { return be.quant_fp4(up(be, x, s), 32); });
  }
  for (const Shape& s : hadamard_shapes()) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    const std::vector<float> x = rnd(n);
    for (Round r : {Round::None, Round::BF16})
      check("hadamard " + Tensor(nullptr, ElemType::F32, s).shape_str() + (r == Round::BF16 ? " bf16" : ""),
            with_round(kF32, r), [&](Backend& be) { return be.hadamard(up(be, x, s), r); });
  }
}

TEST_F(GpuOps, HcPrePostHead) {
  // mHC mixes read hc*D = 16384 values per token (V4-Flash), then 20 Sinkhorn iterations: long
  // reductions, hence kF32Long.
  // {N, D, hc}: hc_cases() with V4-Flash's 4 streams, then 2, 3 and 5 streams (n_out = 35, the
  // kernels' largest; past 4 the pass-2 mix and hc_post take their plain loops), with D a multiple
  // of pass 2's column block or not.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> cases;
  for (const auto [N, D] : hc_cases()) cases.emplace_back(N, D, 4);
  cases.insert(cases.end(), {{2, 4096, 2}, {3, 1000, 3}, {2, 1500, 5}});
  for (const auto& [N, D, hc] : cases) {
    const HcWeights w(*this, D, hc);
    const int64_t W = hc * D;
    const backend::HcParams &site = w.site, &head = w.head;
    const std::vector<float> X = rnd(N * W), out = rnd(N * D), post = rnd(N * hc, 0.5f), comb = rnd(N * hc * hc, 0.3f);
    const std::string sh = " N=" + std::to_string(N) + " D=" + std::to_string(D) + " hc=" + std::to_string(hc);
    for (Round r : {Round::None, Round::BF16}) {
      const std::string rs = r == Round::BF16 ? " bf16" : "";
      const backend::HcPreResult g = gpu->hc_pre(up(*gpu, X, {N, hc, D}), site, r),
                                 c = cpu->hc_pre(up(*cpu, X, {N, hc, D}), site, r);
      expect_close("hc_pre y" + sh + rs, host(*gpu, g.y), host(*cpu, c.y), c.y.shape(), with_round(kF32Long, r));
      expect_close("hc_pre post" + sh + rs, host(*gpu, g.post), host(*cpu, c.post), c.post.shape(),
                   with_round(kF32Long, r));
      expect_close("hc_pre comb" + sh + rs, host(*gpu, g.comb), host(*cpu, c.comb), c.comb.shape(),
                   with_round(kF32Long, r));
      check("hc_post" + sh + rs, with_round(kF32, r), [&](Backend& be) {
        return be.hc_post(up(be, out, {N, D}), up(be, X, {N, hc, D}), up(be, post, {N, hc}), up(be, comb, {N, hc, hc}),
                          r);
      });
      check("hc_head" + sh + rs, with_round(kF32Long, r), [&](Backend& be) {
        return be.hc_head(up(be, X, {N, hc, D}), head, r);
      });
    }
  }
}

}  // namespace
}  // namespace plumb::test
