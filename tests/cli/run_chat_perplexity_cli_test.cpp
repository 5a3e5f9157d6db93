// `plumb run`, `plumb chat` and `plumb perplexity` end to end on the trained tiny model
// (models/tiny-kjv) against the HF goldens of tests/data/golden/v4/tiny-kjv, and the errors a
// user sees for bad flags (exit status 2 with a clear message).
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli_test_util.h"
#include "plumb/tokenizer/utf8.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";
const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden" / "v4" / "tiny-kjv";

using test::CliResult;
using test::read_file;

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel / "config.json")) FAIL() << kModel << " is missing: it is a committed fixture";
    meta_ = nlohmann::json::parse(read_file(kGolden / "meta.json"));
  }

  // Runs plumb with `args` (shell words), `input` on stdin; stdout and stderr kept apart.
  CliResult plumb(const std::string& args, const std::string& input = "") { return test::plumb(args, tmp_.path(), input); }

  const std::string model_ = "--model " + kModel.string() + " --threads 2";
  nlohmann::json meta_;
  test::TempDir tmp_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(RunCli, GreedyContinuationEqualsHfGolden) {
  // The golden prompt's ids (BOS + text) and HF's 64 greedy tokens, decoded.
  const CliResult r =
      plumb("run " + model_ + " --greedy --max-new-tokens 64 --prompt-ids " + (kGolden / "prompt_40.ids.npy").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, meta_["prompts"]["40"]["greedy_text"].get<std::string>() + "\n");
  EXPECT_TRUE(contains(r.err, "40 prompt tokens (0 cached), 64 generated (max tokens)")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(prefill [0-9.]+ tok/s .*decode [0-9.]+ tok/s .*greedy)")))
      << r.err;
}

TEST_F(RunCli, RawTextPromptStartsWithBosLikeTheGoldenSamples) {
  const auto& sample = meta_["samples"]["greedy_psalm"];
  const CliResult r =
      plumb("run " + model_ + " --greedy --max-new-tokens 48 --prompt '" + sample["prompt"].get<std::string>() + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, sample["output"].get<std::string>() + "\n");
}

TEST_F(RunCli, ChatAnswerStopsAtEos) {
  // HF: <BOS><User>John 3:16<Assistant></think>, greedy until EOS (printed there, not by plumb).
  std::string expected = meta_["samples"]["chat_john_3_16"]["output"].get<std::string>();
  expected.erase(expected.find("<｜end▁of▁sentence｜>"));
  const CliResult r = plumb("run " + model_ + " --greedy --chat --prompt 'John 3:16'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");
  EXPECT_TRUE(contains(r.err, "generated (eos)")) << r.err;
}

TEST_F(RunCli, StopStringEndsTheOutputBeforeIt) {
  const std::string golden = meta_["prompts"]["40"]["greedy_text"].get<std::string>();
  const CliResult r = plumb("run " + model_ + " --greedy --stop 'king of Babylon' --prompt-ids " +
                            (kGolden / "prompt_40.ids.npy").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, golden.substr(0, golden.find("king of Babylon")) + "\n");
  EXPECT_TRUE(contains(r.err, "(stop string)")) << r.err;

  // \n in a --stop value is a newline.
  const CliResult nl =
      plumb("run " + model_ + " --greedy --stop '\\n' --prompt-ids " + (kGolden / "prompt_40.ids.npy").string());
  ASSERT_EQ(nl.status, 0) << nl.err;
  EXPECT_EQ(nl.out, golden.substr(0, golden.find('\n')) + "\n");
}

TEST_F(RunCli, SeededSamplingRepeatsAndStreamsValidUtf8) {
  const std::string args = "run " + model_ +
                           " --seed 3 --temperature 0.9 --top-k 40 --min-p 0.02 "
                           "--repetition-penalty 1.1 --max-new-tokens 40 --prompt '《春晓》\n作者：'";
  const CliResult a = plumb(args), b = plumb(args);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_TRUE(utf8::is_valid(a.out));
  EXPECT_TRUE(contains(a.err, "seed 3")) << a.err;
  EXPECT_GT(a.out.size(), 10u);
}

TEST_F(RunCli, SelfCheckReportsSuccess) {
  const CliResult r = plumb("run " + model_ + " --self-check --greedy --max-new-tokens 4 --prompt 'And God said'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "self-check: ok")) << r.err;
}

TEST_F(RunCli, BadFlagsAreClearErrors) {
  const std::string p = " --prompt hi";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"run --model /nonexistent/model" + p, "/nonexistent/model"},
      {"run " + model_ + " --prompt ''", "the prompt is empty"},
      {"run " + model_, "give --prompt TEXT"},
      {"run " + model_ + p + " --temperature abc", "--temperature"},
      {"run " + model_ + p + " --top-p 1.5", "top-p must be in (0, 1]"},
      {"run " + model_ + p + " --max-new-tokens -3", "--max-new-tokens"},
      {"run " + model_ + p + " --think", "--chat"},
      {"run " + model_ + p + " --numerics fast", "--numerics"},
      {"chat --model /nonexistent/model", "/nonexistent/model"},
      {"perplexity " + model_ + " --file /nonexistent.txt", "/nonexistent.txt"},
      {"perplexity " + model_ + " --file " + (kModel / "heldout.txt").string() + " --context 0", "--context"},
  };
  for (const Case& c : cases) {
    const CliResult r = plumb(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\n" << r.out;
  }
}

TEST_F(RunCli, ChatThroughAPipeWithResetAndExit) {
  // The third turn is long enough for the conversation to pass one KV block (128 positions)
  // while it is read and answered, so the fourth starts from the prefix cache's snapshot.
  const CliResult r = plumb("chat " + model_ + " --greedy --self-check --kv-block-size 128 --max-new-tokens 48",
                            "John 3:16\n/reset\nJohn 3:16\n"
                            "Genesis 1:1 In the beginning God created the heaven and the earth. And the earth was "
                            "without form, and void; and darkness was upon the face of the deep. And the Spirit of "
                            "God moved upon the face of the waters.\nPsalm 23:1\n/exit\nnever read\n");
  ASSERT_EQ(r.status, 0) << r.err;
  std::string answer = meta_["samples"]["chat_john_3_16"]["output"].get<std::string>();
  answer.erase(answer.find("<｜end▁of▁sentence｜>"));
  // Same answer after /reset (the history is gone); two more turns follow, then /exit.
  ASSERT_TRUE(r.out.starts_with("> " + answer + "\n> > " + answer + "\n> ")) << r.out;
  EXPECT_TRUE(r.out.ends_with("\n> \n")) << r.out;
  EXPECT_TRUE(contains(r.err, "self-check: ok")) << r.err;
  EXPECT_TRUE(contains(r.err, "(conversation cleared)")) << r.err;
  // The last turn continues from a snapshot of what the turns before it read: only the rest is fed.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(chat: (\d+) prompt tokens \((\d+) cached\)[^\n]*\n$)")))
      << r.err;
  EXPECT_GT(std::stoi(m[2]), 0) << r.err;
  EXPECT_LT(std::stoi(m[2]), std::stoi(m[1])) << r.err;
}

TEST_F(RunCli, ChatThroughAPseudoTerminal) {
  if (std::system("command -v script > /dev/null") != 0) GTEST_SKIP() << "script(1) not available";
  // script(1) gives plumb a terminal for stdin/stdout; the input is typed into it.
  const fs::path typed = tmp_.path() / "typed.txt", log = tmp_.path() / "pty.txt";
  test::write_file(typed, "John 3:16\n/exit\n");
  const std::string cmd = "script -qec '" + std::string(PLUMB_BINARY) + " chat " + model_ + " --greedy' " +
                          log.string() + " < " + typed.string() + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string answer = meta_["samples"]["chat_john_3_16"]["output"].get<std::string>();
  answer.erase(answer.find("<｜end▁of▁sentence｜>"));
  EXPECT_TRUE(contains(read_file(log), answer)) << read_file(log);
}

TEST_F(RunCli, PerplexityOfHeldOutTextEqualsHf) {
  const auto& golden = meta_["perplexity"];
  const CliResult r = plumb("perplexity " + model_ + " --file " + (kModel / "heldout.txt").string() + " --context 256");
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(perplexity +([0-9.]+)\nnll +([0-9.]+) nats)"))) << r.out;
  const double ppl = std::stod(m[1]), nll = std::stod(m[2]), hf = golden["ppl"].get<double>();
  const double rel = ppl / hf - 1;
  std::printf("perplexity: plumb %.5f (NLL %.3f), HF %.5f (NLL %.3f), relative difference %.2e\n", ppl, nll, hf,
              golden["nll_sum"].get<double>(), rel);
  EXPECT_LT(std::abs(rel), 1e-3);
  EXPECT_TRUE(contains(r.out, "tokens      19726 in 78 windows of 256")) << r.out;
  EXPECT_TRUE(contains(r.err, "78/78 windows, 19726/19726 tokens")) << r.err;  // the progress bar's last line
}

}  // namespace
}  // namespace plumb
