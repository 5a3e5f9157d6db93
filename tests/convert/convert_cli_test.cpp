// `plumb convert` end to end through the binary: reports, refusals and exit codes, `plumb inspect`
// on converted and split outputs, and `plumb logits` unchanged by the conversions.
#include <gtest/gtest.h>

#include "convert_test_util.h"
#include "plumb/format/npy.h"

namespace plumb::test {
namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

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
  float amax = 0, dmax = 0;
  for (std::size_t k = 0; k < base.data.size() / 4; ++k) {
    amax = std::max(amax, std::fabs(a[k]));
    dmax = std::max(dmax, std::fabs(a[k] - b[k]));
  }
  EXPECT_LE(dmax, amax * 0x1p-7f);
}

}  // namespace
}  // namespace plumb::test
