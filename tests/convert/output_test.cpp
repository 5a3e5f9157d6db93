// The safety machinery of conversions: atomic output directories, refusals before writing,
// interrupt handling, failures mid-conversion, and the checks on quantized weight/scale pairs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>

#include "convert_test_util.h"
#include "plumb/format/output_dir.h"
#include "plumb/convert/plan.h"
#include "plumb/convert/source.h"

namespace plumb::test {
namespace {

using plumb::AtomicOutputDir;

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename());
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AtomicOutputDir, BuildsBesideDstAndRenamesOnCommit) {
  TempDir tmp;
  const fs::path src = tmp.path() / "src", dst = tmp.path() / "out";
  fs::create_directories(src);
  {
    AtomicOutputDir d(src, dst, false, 0);
    EXPECT_EQ(d.tmp().filename().string().rfind("out.tmp-", 0), 0u);
    write_file(d.tmp() / "f", "new");
    EXPECT_FALSE(fs::exists(dst));
    d.commit();
  }
  EXPECT_TRUE(fs::exists(dst / "f"));
  EXPECT_EQ(entries(tmp.path()).size(), 2u);  // src and out, no leftovers
}

TEST(AtomicOutputDir, ExistingDstNeedsForceAndIsReplacedOnlyWhenComplete) {
  TempDir tmp;
  const fs::path src = tmp.path() / "src", dst = tmp.path() / "out";
  fs::create_directories(src);
  fs::create_directories(dst);
  write_file(dst / "old", "old");
  EXPECT_NE(error_of([&] { AtomicOutputDir(src, dst, false, 0); }).find("already exists (pass --force"),
            std::string::npos);
  {
    AtomicOutputDir d(src, dst, true, 0);
    write_file(d.tmp() / "new", "new");
    EXPECT_TRUE(fs::exists(dst / "old"));  // not touched until commit
    d.commit();
  }
  EXPECT_TRUE(fs::exists(dst / "new"));
  EXPECT_FALSE(fs::exists(dst / "old"));
  EXPECT_EQ(entries(tmp.path()).size(), 2u);
}

TEST(AtomicOutputDir, AbandonedOutputIsRemoved) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "src");
  fs::path t;
  {
    AtomicOutputDir d(tmp.path() / "src", tmp.path() / "out", false, 0);
    t = d.tmp();
    write_file(t / "half", "x");
  }
  EXPECT_FALSE(fs::exists(t));
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
}

TEST(AtomicOutputDir, LeftoversOfKilledRunsAreRemoved) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "src");
  const fs::path dead = tmp.path() / "out.tmp-2147483647",
                 alive = tmp.path() / ("out.tmp-" + std::to_string(::getppid()));
  for (const auto& d : {dead, alive, tmp.path() / "out.tmp-x", tmp.path() / "other.tmp-2147483647"})
    fs::create_directories(d);
  AtomicOutputDir d(tmp.path() / "src", tmp.path() / "out", false, 0);
  EXPECT_FALSE(fs::exists(dead));  // no such process
  EXPECT_TRUE(fs::exists(alive));  // its process still runs
  EXPECT_TRUE(fs::exists(tmp.path() / "out.tmp-x"));
  EXPECT_TRUE(fs::exists(tmp.path() / "other.tmp-2147483647"));
}

TEST(AtomicOutputDir, RefusesTooLittleSpaceAndOverlappingPaths) {
  TempDir tmp;
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  const uint64_t free = plumb::free_bytes(tmp.path());
  EXPECT_GT(free, 0u);
  const std::string e = error_of([&] { AtomicOutputDir(src, tmp.path() / "out", false, free + (1ull << 30)); });
  EXPECT_NE(e.find("not enough free disk space"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
  for (const fs::path& bad : {src, src / "inner", tmp.path(), src / ".." / "src" / ""})
    EXPECT_NE(error_of([&] { AtomicOutputDir(src, bad, true, 0); }).find("must not be, contain or lie inside"),
              std::string::npos)
        << bad;
}

TEST(InterruptGuard, SignalBecomesAnErrorWhileConverting) {
  {
    plumb::InterruptGuard guard;
    plumb::InterruptGuard::check();  // nothing pending
    std::raise(SIGINT);
    EXPECT_NE(error_of([] { plumb::InterruptGuard::check(); }).find("interrupted by signal 2"), std::string::npos);
  }
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);  // the previous handler is back
}

// A conversion that fails half-way (here: a producer throwing on the third tensor) leaves neither
// DST nor its temporary directory.
TEST(ExecutePlan, FailureMidWayLeavesNothing) {
  TempDir tmp;
  const Checkpoint ckpt = Checkpoint::open(kTinyV4.string());
  convert::ConversionPlan plan;
  plan.label = "test";
  plan.files.push_back({"model.safetensors", {}});
  plan.config = convert::read_config_json(kTinyV4);
  int n = 0;
  for (const TensorInfo* t : ckpt.tensors()) {
    convert::Producer p = convert::copy_of(ckpt, *t);
    if (++n == 3) p = [](const convert::TensorSink&) { fail("disk on fire"); };
    plan.tensors.emplace_back(0, convert::PlannedTensor{{t->name, t->dtype, t->shape}, t->nbytes, p});
  }
  const fs::path dst = tmp.path() / "out";
  EXPECT_NE(error_of([&] {
              convert::execute_plan(kTinyV4, plan, {dst.string(), false, false});
            }).find("disk on fire"),
            std::string::npos);
  EXPECT_TRUE(entries(tmp.path()).empty());
}

TEST(QuantMap, RefusesUnpairedQuantizedTensors) {
  TempDir tmp;
  auto build = [&](const std::vector<TensorSpec>& specs) {
    write_shard(tmp.path() / "model.safetensors", specs);
    return Checkpoint::open((tmp.path() / "model.safetensors").string());
  };
  const TensorSpec w{"l.w.weight", DType::F8_E4M3, {256, 128}};
  EXPECT_NE(error_of([&] { convert::QuantMap q(build({w})); }).find("F8_E4M3 weight 'l.w.weight' has no scale tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              convert::QuantMap q(build({w, {"l.w.scale", DType::F8_E8M0, {2, 2}}}));
            }).find("has shape [2, 2], expected [2, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              convert::QuantMap q(build({{"x.scale", DType::F8_E8M0, {1}}}));
            }).find("belongs to no quantized weight"),
            std::string::npos);
  const convert::QuantMap ok(build({w,
                                    {"l.w.weight_scale_inv", DType::F32, {2, 1}},
                                    {"e.weight", DType::I8, {4, 8}},
                                    {"e.scale", DType::F8_E8M0, {4, 1}},
                                    {"tid", DType::I8, {3}}}));
  EXPECT_EQ(ok.count(convert::QuantFormat::FP8Block128), 1u);
  EXPECT_EQ(ok.count(convert::QuantFormat::FP4Block32), 1u);
  EXPECT_EQ(ok.weight("e.weight")->cols, 16);
  EXPECT_TRUE(ok.is_scale("l.w.weight_scale_inv"));
}

TEST(RoutedExpertId, ParsesV3AndV4NamesOnly) {
  EXPECT_EQ(convert::routed_expert_id("layers.0.ffn.experts.12.w1.weight"), 12);
  EXPECT_EQ(convert::routed_expert_id("model.layers.3.mlp.experts.255.down_proj.weight_scale_inv"), 255);
  EXPECT_EQ(convert::routed_expert_id("layers.0.ffn.shared_experts.w1.weight"), std::nullopt);
  EXPECT_EQ(convert::routed_expert_id("layers.0.ffn.experts.x.w1"), std::nullopt);
}

}  // namespace
}  // namespace plumb::test
