// `plumb convert` end to end through the binary: reports, refusals and exit codes, `plumb inspect`
// on converted and split outputs, and `plumb logits` unchanged by the conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../convert/convert_test_util.h"
#include "plumb/format/npy.h"

namespace plumb::test {
namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// max |a| and max |a - b| over two float32 logits arrays of the same shape.
struct LogitsDiff {
  float amax = 0, dmax = 0;
};
LogitsDiff logits_diff(const float* a, const float* b, std::size_t n) {
  LogitsDiff d;
  for (std::size_t k = 0; k < n; ++k) {
    d.amax = std::max(d.amax, std::fabs(a[k]));
    d.dmax = std::max(d.dmax, std::fabs(a[k] - b[k]));
  }
  return d;
}

TEST(ConvertCli, CastReportsAndInspectRecognizesTheResult) {
  TempDir tmp;
  const fs::path dst = tmp.path() / "bf16";
  const auto r = run_plumb("convert cast --to bf16 --no-progress " + kTinyV4.string() + " " + dst.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "383 tensors (44 converted, 44 dropped)")) << r.output;
  EXPECT_TRUE(contains(r.output, "peak RSS")) << r.output;
  const auto i = run_plumb("inspect " + dst.string());
  EXPECT_EQ(i.status, 0) << i.output;
  EXPECT_TRUE(contains(i.output, "binding       ok")) << i.output;
  EXPECT_TRUE(contains(i.output, "converted     cast to bf16")) << i.output;
}

TEST(ConvertCli, ExistingOutputNeedsForceAndNothingIsLeftBehind) {
  TempDir tmp;
  const fs::path dst = tmp.path() / "fp8";
  const std::string args = "convert experts --to fp8 --no-progress " + kTinyV4.string() + " " + dst.string();
  ASSERT_EQ(run_plumb(args).status, 0);
  const auto again = run_plumb(args);
  EXPECT_EQ(again.status, 2);
  EXPECT_TRUE(contains(again.output, "already exists (pass --force")) << again.output;
  EXPECT_EQ(run_plumb(args + " --force").status, 0);
  int n = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) n += e.path().filename() == "fp8" ? 1 : 100;
  EXPECT_EQ(n, 1);  // no DST.tmp-* or DST.old-* siblings
}

TEST(ConvertCli, UsageErrors) {
  TempDir tmp;
  const std::string out = (tmp.path() / "x").string();
  auto r = run_plumb("convert cast --to fp16 " + kTinyV4.string() + " " + out);
  EXPECT_EQ(r.status, 2);
  r = run_plumb("convert shard --tp 0 " + kTinyV4.string() + " " + out);
  EXPECT_EQ(r.status, 2);
  r = run_plumb("convert shard --tp 3 " + kTinyV4.string() + " " + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "n_routed_experts 8 is not divisible by --tp 3")) << r.output;
  r = run_plumb("convert cast --to bf16 " + (tmp.path() / "missing").string() + " " + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "not a directory")) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ConvertCli, InspectChecksATensorParallelSplit) {
  TempDir tmp;
  const fs::path bf16 = tmp.path() / "bf16", tp2 = tmp.path() / "tp2";
  ASSERT_EQ(run_plumb("convert cast --to bf16 --no-progress " + kTinyV4.string() + " " + bf16.string()).status, 0);
  ASSERT_EQ(run_plumb("convert shard --tp 2 --no-progress " + bf16.string() + " " + tp2.string()).status, 0);
  auto i = run_plumb("inspect " + tp2.string());
  EXPECT_EQ(i.status, 0) << i.output;
  EXPECT_TRUE(contains(i.output, "tensor-parallel, 2 ranks")) << i.output;
  EXPECT_TRUE(contains(i.output, "split rules   ok")) << i.output;
  // Loading the directory as one checkpoint explains what it is.
  const auto l = run_plumb("logits --model " + tp2.string() + " --ids " + (kTinyA / "prompt_3.ids.npy").string() +
                           " --out " + (tmp.path() / "l.npy").string());
  EXPECT_EQ(l.status, 2);
  EXPECT_TRUE(contains(l.output, "tensor-parallel split")) << l.output;
  fs::remove(tp2 / "model1-mp2.safetensors");
  i = run_plumb("inspect " + tp2.string());
  EXPECT_EQ(i.status, 2);
  EXPECT_TRUE(contains(i.output, "rank 1: model1-mp2.safetensors is missing")) << i.output;
}

// Logits of the converted tiny-a: bit-identical after the lossless FP8 re-encode of the experts
// (under both numerics); within bf16 rounding after the cast (exact here too, since E8M0-scaled
// FP8 and FP4 values all fit bf16, but only the rounding bound is promised).
TEST(ConvertCli, LogitsSurviveConversion) {
  TempDir tmp;
  const std::string ids = (kTinyA / "prompt_17.ids.npy").string();
  auto logits = [&](const fs::path& model, const std::string& numerics) {
    const fs::path out = tmp.path() / (model.filename().string() + "-" + numerics + ".npy");
    const auto r = run_plumb("logits --numerics " + numerics + " --model " + model.string() + " --ids " + ids +
                             " --out " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return read_npy(out.string());
  };
  const fs::path fp8 = tmp.path() / "fp8", bf16 = tmp.path() / "bf16";
  ASSERT_EQ(run_plumb("convert experts --to fp8 --no-progress " + kTinyA.string() + " " + fp8.string()).status, 0);
  ASSERT_EQ(run_plumb("convert cast --to bf16 --experts --no-progress " + kTinyA.string() + " " + bf16.string()).status,
            0);
  for (const char* numerics : {"reference", "faithful"}) {
    const NpyArray base = logits(kTinyA, numerics), re = logits(fp8, numerics);
    ASSERT_EQ(base.shape, re.shape);
    EXPECT_EQ(base.data, re.data) << numerics;
  }
  const NpyArray base = logits(kTinyA, "reference"), cast = logits(bf16, "reference");
  ASSERT_EQ(base.shape, cast.shape);
  const auto* a = reinterpret_cast<const float*>(base.data.data());
  const auto* b = reinterpret_cast<const float*>(cast.data.data());
  const auto [amax, dmax] = logits_diff(a, b, base.data.size() / 4);
  EXPECT_LE(dmax, amax * 0x1p-7f);
}

// V3 (HF layout, FP8 with F32 128x128 `weight_scale_inv`): the cast to bf16 rounds every weight
// (the scales are not powers of two, so scale * fp8 rarely fits bf16), each to within 2^-9 of
// itself (RNE, 8 significant bits), so each linear's output moves by up to ~2^-9 of its size.
// The deepest path of the 3-layer tiny-a runs through ~16 such linears (q_a, q_b, kv_a, kv_b,
// o_proj, the SwiGLU pair per layer, lm_head); adding their bounds gives 2^-5 of max|logit|.
// (Measured: ~4 x 2^-9, the perturbations being independent.)
TEST(ConvertCli, V3CastLogitsWithinBf16Rounding) {
  TempDir tmp;
  const fs::path src = fs::path(PLUMB_TEST_DATA) / "golden" / "v3" / "tiny-a", bf16 = tmp.path() / "bf16";
  const auto c = run_plumb("convert cast --to bf16 --no-progress " + src.string() + " " + bf16.string());
  ASSERT_EQ(c.status, 0) << c.output;
  const auto i = run_plumb("inspect " + bf16.string());
  EXPECT_EQ(i.status, 0) << i.output;
  EXPECT_TRUE(contains(i.output, "binding       ok")) << i.output;
  auto logits = [&](const fs::path& model, const std::string& ids) {
    const fs::path out = tmp.path() / (model.filename().string() + "-" + ids);
    const auto r =
        run_plumb("logits --model " + model.string() + " --ids " + (src / ids).string() + " --out " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return read_npy(out.string());
  };
  for (const char* ids : {"prompt_7.ids.npy", "prompt_64.ids.npy"}) {
    const NpyArray base = logits(src, ids), cast = logits(bf16, ids);
    ASSERT_EQ(base.shape, cast.shape);
    const auto* a = reinterpret_cast<const float*>(base.data.data());
    const auto* b = reinterpret_cast<const float*>(cast.data.data());
    const auto [amax, dmax] = logits_diff(a, b, base.data.size() / 4);
    const int64_t V = base.shape.back();
    int64_t argmax_diff = 0;
    for (int64_t t = 0; t < base.shape.front(); ++t)
      argmax_diff += std::max_element(a + t * V, a + (t + 1) * V) - a != std::max_element(b + t * V, b + (t + 1) * V) - b;
    std::printf("[convert v3] %s: cast max|diff|/max|logit| = %.3g, argmax mismatches %lld\n", ids, dmax / amax,
                static_cast<long long>(argmax_diff));
    EXPECT_GT(dmax, 0.f);  // the cast really rounded (unlike V4's power-of-two scales)
    EXPECT_LE(dmax, amax * 0x1p-5f) << ids;
  }
}

}  // namespace
}  // namespace plumb::test
