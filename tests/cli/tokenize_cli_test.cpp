// `plumb tokenize` / `plumb detokenize` end to end through the binary: round trip, --add-bos, and
// the errors a user sees (exit code 2 with a message naming the problem).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sys/wait.h>

#include "../tokenizer/test_tokenizers.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

CliResult run_plumb(const std::string& args) {
  std::string cmd = std::string(PLUMB_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("plumb_tokenize_cli_" + std::to_string(::getpid()));
    model_ = test::write_v4_dir(dir_ / "model");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string path(const std::string& name) { return (dir_ / name).string(); }

  fs::path dir_;
  std::string model_;
};

TEST_F(TokenizeCli, RoundTripThroughFiles) {
  std::string in = write("in.jsonl", "\"Hello, world! 123\\nsecond line\"\n\"<think>\u4f60\u597d</think>\"\n\"\"\n");
  CliResult r = run_plumb("tokenize --tokenizer " + model_ + " --input " + in + " --output " + path("ids.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(path("ids.jsonl")), "[19923,14,2058,3,223,6895,201,10930,2562]\n[128821,30594,128822]\n[]\n");

  r = run_plumb("detokenize --tokenizer " + model_ + "/tokenizer.json --input " + path("ids.jsonl") + " --output " +
                path("text.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(path("text.jsonl")), test::read_text(in));
}

TEST_F(TokenizeCli, AddBosAndSkipSpecial) {
  std::string in = write("in.jsonl", "\"Hello\"\n");
  CliResult r = run_plumb("tokenize --add-bos --tokenizer " + model_ + " --input " + in + " --output " + path("ids.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(path("ids.jsonl")), "[0,19923]\n");
  write("special.jsonl", "[0,19923,1]\n");
  r = run_plumb("detokenize --skip-special --tokenizer " + model_ + " --input " + path("special.jsonl") + " --output -");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "\"Hello\"\n");
}

TEST_F(TokenizeCli, ClearErrors) {
  std::string good = write("good.jsonl", "\"fine\"\n");
  CliResult r = run_plumb("tokenize --tokenizer " + path("nowhere") + " --input " + good);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("tokenizer not found: " + path("nowhere") + " (expected a tokenizer.json"), std::string::npos) << r.output;

  r = run_plumb("tokenize --tokenizer " + model_ + " --input " + path("missing.jsonl"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(path("missing.jsonl") + ": cannot open input file: No such file"), std::string::npos) << r.output;

  std::string bad = write("bad.jsonl", "\"ok\"\n{not json\n");
  r = run_plumb("tokenize --tokenizer " + model_ + " --input " + bad + " --output " + path("out.jsonl"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(bad + ":2: not valid JSON: {not json"), std::string::npos) << r.output;

  std::string number = write("number.jsonl", "42\n");
  r = run_plumb("tokenize --tokenizer " + model_ + " --input " + number);
  EXPECT_NE(r.output.find(number + ":1: expected a JSON string, got number"), std::string::npos) << r.output;

  std::string ids = write("ids.jsonl", "[1,2]\n[5,129280]\n");
  r = run_plumb("detokenize --tokenizer " + model_ + " --input " + ids);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(ids + ":2: token id 129280 is out of range (this tokenizer has ids 0..129279)"),
            std::string::npos)
      << r.output;

  std::string negative = write("negative.jsonl", "[-1]\n");
  r = run_plumb("detokenize --tokenizer " + model_ + " --input " + negative);
  EXPECT_NE(r.output.find(negative + ":1: token ids must be non-negative integers, got -1"), std::string::npos)
      << r.output;

  r = run_plumb("tokenize --input " + good);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--tokenizer is required"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace plumb
