// The GPU's GEMV (the decode path of linear(), kernels/linear_gemv.cu) against the CPU and against
// itself: rows independent of the batch, every shape its tiling has, the fused act-quant bitwise
// the separate one, every FP8 code through both decodes (harness: gpu_test_util.h). The other
// linear paths and ops are in gpu_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../util/scoped_env.h"
#include "gpu_test_util.h"

namespace plumb::test {
namespace {

using backend::LinearOpts;

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

// A decode step's rms_norm writes the act_fp8 copy of its output (GpuBackend::set_norm_act_fp8,
// PLUMB_GPU_ACT_QUANT=norm), which the linears that apply act_fp8 to it read instead of staging x.
// The copy is bitwise quant_fp8 of the output (another kernel), the output is unchanged, and
// each consumer gives the bits of the one that quantizes x itself: every weight format, one group
// and two groups of K = 512. No copy is read past kNormActFp8Rows rows, with an FP8 norm weight
// (the element loop) or after copy_rows or copy_row_runs wrote into the output. Widths: 1 to 8 of
// a thread's elements (the 128-blocks' chunks), d not a multiple of 128 (a partial last block),
// the tiny models', V4's and V3's; rows whose 128-blocks are ~1, below the amax floor or past
// e4m3's range.
TEST_F(GpuOps, NormActFp8CopyBitwise) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  using backend::NormMath;
  for (int64_t D : {96, 160, 256, 1000, 1024, 1536, 4096, 7168, 8192}) {
    const NormWeights nw(rnd(D, 0.1f));
    const WeightView vb = nw.bf16.view(), vf = nw.f32.view(), v8 = nw.fp8.view();
    struct Form {
      const char* name;
      const WeightView* w;
      NormMath math;
      Round r;
    };
    for (int64_t N : {1, 3, 8, 9}) {
      std::vector<float> x = rnd(N * D, 2.f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t b0 = 0; b0 < D; b0 += 128) {
          const int64_t kind = uniform(0, 7);
          const float f = kind == 0 ? 1e-7f : kind == 1 ? 3e4f : 1.f;
          for (int64_t k = b0; k < std::min(D, b0 + 128); ++k) x[n * D + k] *= f;
        }
      std::vector<float> xb = x;
      for (float& v : xb) v = bf16(v);
      for (const Form& f : {Form{"bf16 weight", &vb, NormMath::F32, Round::None},
                            Form{"f32 weight bf16 out", &vf, NormMath::F32, Round::BF16},
                            Form{"plain", nullptr, NormMath::F32, Round::None},
                            Form{"bf16 steps", nullptr, NormMath::BF16Steps, Round::BF16},
                            Form{"fp8 weight", &v8, NormMath::F32, Round::None}}) {
        const std::string what = "rms_norm D=" + std::to_string(D) + " N=" + std::to_string(N) + " " + f.name;
        const std::vector<float>& in = f.math == NormMath::BF16Steps ? xb : x;
        const bool expect_copy = N <= gpu::GpuBackend::kNormActFp8Rows && f.w != &v8;
        set_norm_act_fp8(false);
        const Tensor plain_y = gpu->rms_norm(up(*gpu, in, {N, D}), f.w, 1e-6f, f.math, f.r);
        set_norm_act_fp8(true);
        const Tensor y = gpu->rms_norm(up(*gpu, in, {N, D}), f.w, 1e-6f, f.math, f.r);
        set_norm_act_fp8(false);
        ASSERT_FALSE(act_fp8_copy_of(plain_y).defined()) << ctx(what + ": a copy with the switch off");
        ASSERT_EQ(act_fp8_copy_of(y).defined(), expect_copy) << ctx(what + ": whether the norm wrote the act_fp8 copy");
        expect_bitwise(what + ": the output with and without the copy", host(*gpu, y), host(*gpu, plain_y));
        if (!expect_copy) continue;
        expect_bitwise(what + ": the copy vs quant_fp8 of the output", host(*gpu, act_fp8_copy_of(y)),
                       host(*gpu, gpu->quant_fp8(plain_y, D, 128)));
        if (D != 1024 && D != 1000) continue;
        // The consumers on the GEMV (Auto takes the FP8 tensor cores from a few rows on Hopper,
        // which quantize x their own way): every weight format, K = D, and K = 512 (two groups) at 1024.
        if (!set_path(TestLinearPath::Gemv)) GTEST_SKIP() << "the GEMV path is not selectable in this build";
        for (int64_t G : D == 1024 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}) {
          const int64_t K = D / G, R = 384;
          const std::vector<float> lw = rnd(G * R * K, 0.05f);
          for (const FormatWeight& fw : every_format(G * R, K, lw, rng)) {
            const WeightView view = fw.view();
            const LinearOpts act{G, true, Round::None};
            const std::string lin = what + " G=" + std::to_string(G) + " " + fw.name + " linear";
            const int64_t reads = set_norm_act_fp8(false);
            const std::vector<float> got = host(*gpu, gpu->linear(y, view, act));
            EXPECT_EQ(set_norm_act_fp8(false) - reads, 1) << ctx(lin + ": reads of the copy");
            expect_bitwise(lin + ": reading the copy vs staging x", got, host(*gpu, gpu->linear(plain_y, view, act)));
          }
        }
        set_path(TestLinearPath::Auto);
        // copy_rows writes into the output: its copy is gone, and a linear sees the new values.
        set_norm_act_fp8(true);
        Tensor z = gpu->rms_norm(up(*gpu, in, {N, D}), f.w, 1e-6f, f.math, f.r);
        set_norm_act_fp8(false);
        const Tensor other = up(*gpu, rnd(D), {1, D});
        gpu->copy_rows(z, 0, other, 0, 1);
        EXPECT_FALSE(act_fp8_copy_of(z).defined()) << ctx(what + ": the copy after copy_rows");
        const OwnedWeight w1 = bf16_weight({64, D}, rnd(64 * D, 0.05f));
        const WeightView v1 = w1.view();
        const LinearOpts act{1, true, Round::None};
        const int64_t reads = set_norm_act_fp8(false);
        expect_bitwise(what + ": a linear after copy_rows", host(*gpu, gpu->linear(z, v1, act)),
                       host(*gpu, gpu->linear(up(*gpu, host(*gpu, z), {N, D}), v1, act)));
        EXPECT_EQ(set_norm_act_fp8(false), reads) << ctx(what + ": reads of a copy after copy_rows");
        // copy_row_runs too (row 0 over row N - 1).
        set_norm_act_fp8(true);
        Tensor u = gpu->rms_norm(up(*gpu, in, {N, D}), f.w, 1e-6f, f.math, f.r);
        set_norm_act_fp8(false);
        const std::vector<int64_t> from{0}, to{N - 1};
        gpu->copy_row_runs(u, from, to, 1);
        EXPECT_FALSE(act_fp8_copy_of(u).defined()) << ctx(what + ": the copy after copy_row_runs");
        expect_bitwise(what + ": a linear after copy_row_runs", host(*gpu, gpu->linear(u, v1, act)),
                       host(*gpu, gpu->linear(up(*gpu, host(*gpu, u), {N, D}), v1, act)));
        EXPECT_EQ(set_norm_act_fp8(false), reads) << ctx(what + ": reads of a copy after copy_row_runs");
      }
    }
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
}

// linear_pair (GpuBackend::set_linear_pairs, PLUMB_GPU_LINEAR_PAIRS=on): two FP8 GEMVs of one x
// row in one launch (k::linear_gemvs), each output bitwise its own linear(): the decode shapes of
// wq_a + wkv (wkv's plan has 1 row a warp on a large device; the pair's kernel sums it 4 rows a
// warp in the same order), of a CSA layer's two wq_b and of the shared expert's w1 + w3, small and
// odd ones, with and without act_fp8, x from a norm that wrote its act_fp8 copy, and either scale
// type. The pairs the kernel cannot take alike run as two launches and must agree too: K not a
// multiple of 16, two x rows, mixed scale types or formats.
TEST_F(GpuOps, LinearPairIsTwoLinears) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "GPU ops on the CPU backend";
  struct Case {
    int64_t R0, R1, K;
  };
  for (const Case& c : {Case{1024, 512, 4096}, Case{2048, 2048, 4096}, Case{96, 200, 512}, Case{4096, 64, 1024},
                        Case{300, 64, 1000}}) {
    const std::vector<float> w0 = rnd(c.R0 * c.K, 0.05f), w1 = rnd(c.R1 * c.K, 0.05f);
    const std::vector<FormatWeight> f0 = every_format(c.R0, c.K, w0, rng), f1 = every_format(c.R1, c.K, w1, rng);
    const NormWeights nw(rnd(c.K, 0.1f));
    const WeightView norm_w = nw.bf16.view();
    for (std::size_t i = 0; i < f0.size(); ++i)
      for (std::size_t j : {i, (i + 1) % f0.size()})
        for (int64_t N : {1, 2})
          for (int act = 0; act < 3; ++act) {  // 2: act_fp8 on a norm's output with its act_fp8 copy
            const WeightView a = f0[i].view(), b = f1[j].view();
            const LinearOpts o{1, act > 0, Round::None};
            const std::string what = "R " + std::to_string(c.R0) + " + " + std::to_string(c.R1) + ", K " +
                                     std::to_string(c.K) + ", N " + std::to_string(N) + ", " + f0[i].name + " + " +
                                     f1[j].name + (act == 1 ? ", act_fp8" : act == 2 ? ", act_fp8 copy" : "");
            set_norm_act_fp8(act == 2);
            const Tensor x = act == 2 ? gpu->rms_norm(up(*gpu, rnd(N * c.K, 2.f), {N, c.K}), &norm_w, 1e-6f,
                                                      backend::NormMath::F32, Round::None)
                                      : up(*gpu, rnd(N * c.K), {N, c.K});
            set_norm_act_fp8(false);
            const int64_t before = set_linear_pairs(true);
            const auto [ya, yb] = gpu->linear_pair(x, a, b, o);
            const int64_t launches = set_linear_pairs(false) - before;
            const bool fp8 = f0[i].name.rfind("fp8", 0) == 0;
            EXPECT_EQ(launches, fp8 && i == j && N == 1 && c.K % 16 == 0 ? 1 : 0) << ctx(what + ": pairs in one launch");
            expect_bitwise(what + ": the first output vs its linear()", host(*gpu, ya), host(*gpu, gpu->linear(x, a, o)));
            expect_bitwise(what + ": the second output vs its linear()", host(*gpu, yb), host(*gpu, gpu->linear(x, b, o)));
          }
  }
#else
  GTEST_SKIP() << "no GPU backend built";
#endif
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

}  // namespace
}  // namespace plumb::test
