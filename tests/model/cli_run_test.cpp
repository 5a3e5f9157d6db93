// `plumb logits` / `plumb generate` end to end through the binary: outputs on an HF fixture and
// clear errors (exit status 2) for bad inputs.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "../format/safetensors_corpus.h"
#include "plumb/format/npy.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(PLUMB_TEST_DATA) / "golden" / "v4" / "tiny-b";

struct CliResult {
  int status;
  std::string err;
};

CliResult plumb(const std::string& args, const fs::path& tmp) {
  const fs::path err = tmp / "stderr.txt";
  const std::string cmd = std::string(PLUMB_BINARY) + " " + args + " 2> " + err.string() + " > /dev/null";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFixture)) GTEST_SKIP() << kFixture << " not present";
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

  const std::vector<int32_t> oov = {5, 400};
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

}  // namespace
}  // namespace plumb
