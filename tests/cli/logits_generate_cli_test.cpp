// `plumb logits` / `plumb generate` end to end through the binary: outputs on an HF fixture and
// clear errors (exit status 2) for bad inputs.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli_test_util.h"
#include "plumb/format/npy.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(PLUMB_TEST_DATA) / "golden" / "v4" / "tiny-b";

using test::CliResult;
using test::plumb;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFixture)) FAIL() << kFixture << " is missing: it is a committed fixture";
  }
  test::TempDir tmp;
  std::string model = "--model " + kFixture.string();
};

TEST_F(Cli, LogitsAndGenerateWriteTheirOutputs) {
  const fs::path out = tmp.path() / "l.npy", taps = tmp.path() / "taps";
  CliResult r = plumb("logits " + model + " --ids " + (kFixture / "prompt_17.ids.npy").string() + " --out " + out.string() +
                    " --threads 1 --dump-taps " + taps.string(),
                tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const NpyArray a = read_npy(out.string());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{17, 400}));
  EXPECT_TRUE(fs::exists(taps / "layer.2.attn.index_topk.npy"));
  EXPECT_TRUE(fs::exists(taps / "logits.npy"));

  const fs::path ids = tmp.path() / "g.npy";
  r = plumb("generate " + model + " --ids " + (kFixture / "prompt_17.ids.npy").string() +
                " --max-new-tokens 5 --greedy --ignore-eos --numerics faithful --out-ids " + ids.string(),
            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_token_ids(ids.string()).size(), 5u);
}

TEST_F(Cli, BadInputsAreClearErrors) {
  const fs::path ids = tmp.path() / "ids.npy", out = tmp.path() / "o.npy";
  auto logits = [&] { return plumb("logits " + model + " --ids " + ids.string() + " --out " + out.string(), tmp.path()); };

  const std::vector<TokenId> oov = {5, 400};
  write_npy(ids.string(), DType::I32, {2}, oov.data());
  CliResult r = logits();
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("token id 400 is outside the vocabulary [0, 400)"), std::string::npos) << r.err;

  write_npy(ids.string(), DType::I64, {0}, nullptr);
  r = logits();
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;

  const std::vector<float> f = {1.f, 2.f};
  write_npy(ids.string(), DType::F32, {2}, f.data());
  r = logits();
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("must be int32 or int64"), std::string::npos) << r.err;

  r = plumb("logits " + model + " --ids " + ids.string() + " --out " + out.string() + " --numerics fast", tmp.path());
  EXPECT_NE(r.status, 0);
}

// DeepSeek-V3 checkpoints go to the V3 forward by model_type (tests/data/golden/v3).
TEST_F(Cli, V3LogitsGenerateInspect) {
  const fs::path v3 = fs::path(PLUMB_TEST_DATA) / "golden" / "v3" / "tiny-a";
  const fs::path out = tmp.path() / "l.npy", ids = tmp.path() / "g.npy";
  CliResult r = plumb("logits --model " + v3.string() + " --ids " + (v3 / "prompt_7.ids.npy").string() + " --out " +
                          out.string() + " --threads 1",
                      tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const NpyArray got = read_npy(out.string()), want = read_npy((v3 / "prompt_7.logits.npy").string());
  ASSERT_EQ(got.shape, want.shape);
  const float* g = reinterpret_cast<const float*>(got.data.data());
  const float* w = reinterpret_cast<const float*>(want.data.data());
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) num = std::max(num, double(std::fabs(g[i] - w[i]))), den = std::max(den, double(std::fabs(w[i])));
  EXPECT_LE(num / den, 1e-4);

  r = plumb("generate --model " + v3.string() + " --ids " + (v3 / "prompt_7.ids.npy").string() +
                " --max-new-tokens 32 --greedy --ignore-eos --out-ids " + ids.string(),
            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_token_ids(ids.string()), read_token_ids((v3 / "greedy_7.ids.npy").string()));

  r = plumb("inspect " + v3.string(), tmp.path());
  EXPECT_EQ(r.status, 0) << r.err;
  // The faithful profile (the release's bf16 numerics): bf16-valued logits near HF's f32 ones
  // (v3_faithful_golden_test compares them with the release itself).
  r = plumb("logits --model " + v3.string() + " --ids " + (v3 / "prompt_7.ids.npy").string() + " --out " + out.string() +
                " --numerics faithful --threads 1",
            tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  const NpyArray fa = read_npy(out.string());
  ASSERT_EQ(fa.shape, want.shape);
  const float* f = reinterpret_cast<const float*>(fa.data.data());
  double dot = 0, nf = 0, nw = 0;
  bool bf16 = true;
  for (int64_t i = 0; i < want.numel(); ++i) {
    uint32_t u;
    std::memcpy(&u, f + i, 4);
    bf16 = bf16 && (u & 0xFFFFu) == 0;
    dot += double(f[i]) * w[i], nf += double(f[i]) * f[i], nw += double(w[i]) * w[i];
  }
  EXPECT_TRUE(bf16);
  EXPECT_GT(dot / std::sqrt(nf * nw), 0.999);
}

}  // namespace
}  // namespace plumb
