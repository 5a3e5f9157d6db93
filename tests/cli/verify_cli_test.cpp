// `plumb verify` end to end through the binary on the tiny checkpoints: CPU against CPU passes
// and writes the three reports; reference numerics against a faithful dump fails with exit 3 and
// names the first failing tap; bad input exits 2; the GPU run skips without a GPU. Plus the
// metrics themselves (a NaN never passes).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli_test_util.h"
#include "../util/scoped_env.h"
#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/format/npy.h"
#include "plumb/verify/compare.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(PLUMB_SOURCE_DIR) / "models";

using test::CliResult;
using test::plumb;
using test::read_file;
using test::ScopedEnv;

class VerifyCli : public ::testing::Test {
 protected:
  test::TempDir tmp;
  // A short prompt inside every tiny model's vocabulary (tiny-v4 has 512 ids), long enough to
  // close compressor windows of ratio 4 and 16.
  fs::path ids_file() {
    const fs::path p = tmp.path() / "ids.npy";
    std::vector<int32_t> ids;
    for (int i = 0; i < 19; ++i) ids.push_back((i * 37 + 5) % 500);
    write_npy(p.string(), DType::I32, {static_cast<int64_t>(ids.size())}, ids.data());
    return p;
  }
  nlohmann::json report(const fs::path& dir) { return nlohmann::json::parse(read_file(dir / "verify.json")); }
};

void expect_complete_report(const nlohmann::json& j, const fs::path& dir) {
  for (const char* k : {"passed", "verdict", "first_failing_tap", "model", "backend", "against", "numerics",
                        "threshold", "taps", "logits", "greedy", "facts", "audit"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"git_rev", "build_type", "compiler", "date_utc", "command_line"})
    EXPECT_TRUE(j["audit"].contains(k)) << k;
  EXPECT_TRUE(j["facts"]["tested"].contains("backend"));
  EXPECT_NE(j["audit"]["command_line"].get<std::string>().find("verify"), std::string::npos);
  EXPECT_NE(read_file(dir / "verify.md").find("## Taps"), std::string::npos);
  const std::string html = read_file(dir / "verify.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  // self-contained: nothing is loaded from elsewhere
  EXPECT_EQ(html.find("src=\""), std::string::npos);
  EXPECT_EQ(html.find("href=\""), std::string::npos);
}

TEST_F(VerifyCli, CpuAgainstCpuPassesOnTinyV4) {
  const fs::path out = tmp.path() / "report";
  const CliResult r = plumb("verify --model " + (kModels / "tiny-v4").string() + " --backend cpu --against cpu --ids " +
                                ids_file().string() + " --report " + out.string() + " --steps 4 --threads 2",
                            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = report(out);
  expect_complete_report(j, out);
  EXPECT_TRUE(j["passed"].get<bool>());
  EXPECT_TRUE(j["first_failing_tap"].is_null());
  ASSERT_GT(j["taps"].size(), 10u);
  EXPECT_EQ(j["taps"][0]["name"], "embed");  // forward order
  for (const auto& t : j["taps"]) {
    EXPECT_TRUE(t["pass"].get<bool>()) << t["name"];
    EXPECT_EQ(t["cosine"].get<double>(), 1.0) << t["name"];  // the same backend twice: bit-equal
    EXPECT_EQ(t["max_abs_diff"].get<double>(), 0.0) << t["name"];
  }
  EXPECT_EQ(j["logits"]["positions"], 19);
  EXPECT_EQ(j["logits"]["argmax_agree"], 19);
  EXPECT_TRUE(j["greedy"]["compared"].get<bool>());
  EXPECT_TRUE(j["greedy"]["agree"].get<bool>());
  EXPECT_EQ(j["greedy"]["tokens_got"].size(), 4u);
}

TEST_F(VerifyCli, CpuAgainstCpuPassesOnTinyKjvFaithfulWithInlineIds) {
  const fs::path out = tmp.path() / "report";
  const CliResult r = plumb("verify --model " + (kModels / "tiny-kjv").string() +
                                " --backend cpu --against cpu --numerics faithful --ids 0,11,230,4001,77,9 --report " +
                                out.string() + " --steps 3 --threads 2",
                            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = report(out);
  expect_complete_report(j, out);
  EXPECT_TRUE(j["passed"].get<bool>());
  EXPECT_EQ(j["numerics"], "faithful");
  EXPECT_EQ(j["logits"]["positions"], 6);
}

TEST_F(VerifyCli, DeepseekV3ComparesTapsLogitsAndGreedyTokens) {
  const fs::path fixture = fs::path(PLUMB_TEST_DATA) / "golden" / "v3" / "tiny-a", out = tmp.path() / "report";
  const CliResult r = plumb("verify --model " + fixture.string() + " --backend cpu --against cpu --ids " +
                                (fixture / "prompt_7.ids.npy").string() + " --report " + out.string() + " --steps 3",
                            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = report(out);
  expect_complete_report(j, out);
  EXPECT_EQ(j["model_type"], "deepseek_v3");
  // embed, 5 per layer, final_norm, logits
  const int64_t layers = load_model_config(fixture.string()).num_hidden_layers;
  ASSERT_EQ(static_cast<int64_t>(j["taps"].size()), 3 + 5 * layers);
  EXPECT_EQ(j["taps"][0]["name"], "embed");
  EXPECT_EQ(j["taps"][2]["name"], "layer.0.attn.out");
  EXPECT_EQ(j["taps"].back()["name"], "logits");
  for (const auto& t : j["taps"]) EXPECT_TRUE(t["pass"].get<bool>()) << t.dump();
  EXPECT_TRUE(j["greedy"]["agree"].get<bool>());

  // faithful numerics, layers isolated through V3's residual taps
  const fs::path iso = tmp.path() / "isolated";
  const CliResult f = plumb("verify --model " + fixture.string() + " --backend cpu --against cpu --numerics faithful " +
                                "--isolate-layers --ids 5,9,17 --report " + iso.string() + " --steps 2",
                            tmp.path());
  ASSERT_EQ(f.status, 0) << f.err;
  const nlohmann::json fj = report(iso);
  // --gpu-order takes cpu or fast only (on a CPU-only comparison it changes nothing)
  const CliResult bad = plumb("verify --model " + fixture.string() + " --backend cpu --against cpu --ids 5,9 " +
                                  "--gpu-order exact --report " + (tmp.path() / "bad").string(),
                              tmp.path());
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("gpu-order"), std::string::npos) << bad.err;
  EXPECT_EQ(fj["numerics"], "faithful");
  ASSERT_EQ(fj["notes"].size(), 1u);
  EXPECT_NE(fj["notes"][0].get<std::string>().find("layer.L.residual"), std::string::npos) << fj["notes"];
}

TEST_F(VerifyCli, ReferenceAgainstFaithfulDumpsFailsWithExit3) {
  const fs::path dumps = tmp.path() / "dumps", out = tmp.path() / "report", ids = ids_file();
  const std::string model = " --model " + (kModels / "tiny-v4").string();
  CliResult r = plumb("logits" + model + " --numerics faithful --ids " + ids.string() + " --out " +
                          (tmp.path() / "l.npy").string() + " --threads 2 --dump-taps " + dumps.string(),
                      tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  // The profiles differ by bf16 / FP8 rounding (~1e-3 relative): a tight threshold separates them.
  r = plumb("verify" + model + " --backend cpu --numerics reference --against-dumps " + dumps.string() + " --ids " +
                ids.string() + " --report " + out.string() + " --threads 2 --threshold 0.999999",
            tmp.path());
  ASSERT_EQ(r.status, 3) << r.err;
  const nlohmann::json j = report(out);
  expect_complete_report(j, out);
  EXPECT_FALSE(j["passed"].get<bool>());
  ASSERT_TRUE(j["first_failing_tap"].is_string());
  const std::string first = j["first_failing_tap"];
  EXPECT_NE(r.err.find("first failing tap " + first), std::string::npos) << r.err;
  EXPECT_FALSE(j["greedy"]["compared"].get<bool>());  // a dump holds no tokens
  // Every tap before the first failing one passed (forward order).
  for (const auto& t : j["taps"]) {
    if (t["name"] == first) break;
    EXPECT_TRUE(t["pass"].get<bool>()) << t["name"];
  }
  // The same dumps against the faithful profile agree exactly.
  r = plumb("verify" + model + " --backend cpu --numerics faithful --against-dumps " + dumps.string() + " --ids " +
                ids.string() + " --report " + (tmp.path() / "same").string() + " --threads 2 --threshold 0.999999",
            tmp.path());
  EXPECT_EQ(r.status, 0) << r.err;
}

// `reference` in the GPU's fast order; `faithful` in the CPU's order (PLUMB_GPU_ORDER=cpu:
// bitwise), because free running in the fast order it is documented not to meet the bar on the
// random tiny models (docs/CORRECTNESS.md: its re-quantization amplifies an ulp; the HIP
// emulator's wave64 order fails it at layer 3 of tiny-v4); GpuFastOrder.* bounds the fast order
// with the layers isolated.
TEST_F(VerifyCli, GpuAgainstCpu) {
  if (backend::gpu_backend_name().empty()) GTEST_SKIP() << "plumb was built without a GPU backend";
  if (const std::string why = backend::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const fs::path out = tmp.path() / "report";
  for (const char* numerics : {"reference", "faithful"}) {
    const ScopedEnv order("PLUMB_GPU_ORDER", std::string(numerics) == "faithful" ? "cpu" : nullptr);
    const CliResult r = plumb("verify --model " + (kModels / "tiny-v4").string() + " --backend " +
                                  backend::gpu_backend_name() + " --against cpu --numerics " + numerics + " --ids " +
                                  ids_file().string() + " --report " + out.string() + " --steps 8",
                              tmp.path());
    EXPECT_EQ(r.status, 0) << numerics << "\n" << r.err << "\n" << read_file(out / "verify.md");
    const nlohmann::json j = report(out);
    EXPECT_TRUE(j["facts"]["tested"].contains("device")) << j["facts"].dump();
  }
}

TEST_F(VerifyCli, BadInputExits2WithAClearMessage) {
  const fs::path out = tmp.path() / "report", ids = ids_file();
  const std::string v4 = " --model " + (kModels / "tiny-v4").string();
  CliResult r = plumb("verify --model " + (tmp.path() / "nope").string() + " --backend cpu --ids " + ids.string() +
                          " --report " + out.string(),
                      tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = plumb(
      "verify" + v4 + " --backend cpu --ids " + (tmp.path() / "missing.npy").string() + " --report " + out.string(),
      tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("missing.npy"), std::string::npos) << r.err;
  r = plumb("verify" + v4 + " --backend cpu --ids 3,99999 --report " + out.string(), tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  r = plumb("verify" + v4 + " --backend cpu --ids " + ids.string() + " --against-dumps " + tmp.path().string() +
                " --report " + out.string(),
            tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("logits.npy"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "verify.json"));
}

TEST(VerifyMetrics, CosineRelL2AndNanNeverPasses) {
  const std::vector<float> ref = {1, 2, 3, 4}, same = ref, off = {1, 2, 3, 5};
  verify::Metrics m = verify::compare(same, ref);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.rel_l2, 0.0);
  EXPECT_EQ(m.differing, 0);
  m = verify::compare(off, ref);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_NEAR(m.rel_l2, 1 / std::sqrt(30.0), 1e-12);
  EXPECT_NEAR(m.cosine, 34 / std::sqrt(39.0 * 30.0), 1e-12);
  EXPECT_EQ(m.differing, 1);
  const std::vector<float> nan = {1, 2, std::numeric_limits<float>::quiet_NaN(), 4};
  m = verify::compare(nan, ref);
  EXPECT_EQ(m.nan, 1);
  EXPECT_EQ(m.cosine, 0.0);
  EXPECT_TRUE(std::isinf(m.rel_l2));
  const verify::LogitsAgreement la =
      verify::compare_logits(std::vector<float>{0, 2, 2, 1, 0, 0}, std::vector<float>{0, 2, 1, 0, 1, 0}, 3);
  EXPECT_EQ(la.positions, 2);
  EXPECT_EQ(la.argmax_agree, 1);  // row 0: both pick id 1 (lowest of ties), row 1: 0 vs 1
  EXPECT_DOUBLE_EQ(la.rel(), 0.5);
}

}  // namespace
}  // namespace plumb
