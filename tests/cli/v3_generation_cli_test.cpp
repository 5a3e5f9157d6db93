// `plumb run`, `plumb chat` and `plumb perplexity` on a DeepSeek-V3 checkpoint (the HF tiny-a
// fixture with a small byte-level tokenizer beside it): they go through the one model interface,
// so they work on V3 as on V4. Expected values come from the HF greedy golden and from the
// model's own prefill logits, scored here in double precision.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../tokenizer/synthetic_tokenizer.h"
#include "cli_test_util.h"
#include "plumb/format/npy.h"
#include "plumb/model/model.h"
#include "plumb/tokenizer/chat.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(PLUMB_TEST_DATA) / "golden" / "v3" / "tiny-a";

using test::CliResult;

class V3GenerationCli : public ::testing::Test {
 protected:
  // The fixture's config and weights, and a tokenizer that knows every one of its 320 ids: bytes,
  // the synthetic merges, the chat markers, then one filler token per remaining id.
  void SetUp() override {
    if (!fs::exists(kFixture / "config.json")) FAIL() << kFixture << " is missing: it is a committed fixture";
    model_dir_ = tmp_.path() / "v3";
    fs::create_directories(model_dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::create_symlink(kFixture / f, model_dir_ / f);
    nlohmann::json added = nlohmann::json::array();
    TokenId id = 261;
    for (const char* m : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"})
      added.push_back(test::added_token(id++, m));
    for (; id < 320; ++id) added.push_back(test::added_token(id, "<t" + std::to_string(id) + ">"));
    test::write_file(model_dir_ / "tokenizer.json", test::synthetic_tokenizer_json(added).dump());
  }

  CliResult plumb(const std::string& args, const std::string& input = "") {
    return test::plumb(args + " --model " + model_dir_.string() + " --threads 2", tmp_.path(), input);
  }

  test::TempDir tmp_;
  fs::path model_dir_;
};

TEST_F(V3GenerationCli, RunContinuesLikeTheHfGreedyGolden) {
  const CliResult r = plumb("run --prompt-ids " + (kFixture / "prompt_7.ids.npy").string() + " --greedy --max-new-tokens 12");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<TokenId> want = read_token_ids((kFixture / "greedy_7.ids.npy").string());
  want.resize(12);
  const auto eos = std::find(want.begin(), want.end(), TokenId{1});  // the config's eos_token_id ends it
  want.erase(eos, want.end());
  const Tokenizer tok = Tokenizer::load(model_dir_.string());
  EXPECT_EQ(r.out, tok.decode(want) + "\n");
  EXPECT_NE(r.err.find("run: 7 prompt tokens"), std::string::npos) << r.err;
}

TEST_F(V3GenerationCli, ChatAnswersThroughAPipe) {
  const CliResult r = plumb("chat --greedy --max-new-tokens 6", "hello\n/exit\n");
  ASSERT_EQ(r.status, 0) << r.err;
  // The same turn through the library: the chat template, then greedy decoding of the model.
  const Tokenizer tok = Tokenizer::load(model_dir_.string());
  const std::vector<ChatMessage> turn = {{ChatMessage::Role::kUser, "hello"}};
  const std::vector<TokenId> prompt = encode_chat(tok, turn, ChatMode::kChat);
  const std::unique_ptr<Model> m = load_model(model_dir_.string(), {"cpu", 2, Numerics::Reference});
  std::vector<TokenId> answer = m->generate(prompt, {.max_new_tokens = 6});
  if (!answer.empty() && answer.back() == 1) answer.pop_back();  // EOS is not printed
  EXPECT_EQ(r.out, "> " + tok.decode(answer) + "\n> \n");
  EXPECT_NE(r.err.find("chat: " + std::to_string(prompt.size()) + " prompt tokens"), std::string::npos) << r.err;
}

TEST_F(V3GenerationCli, PerplexityEqualsTheModelsOwnLogits) {
  const std::string text = "hello hello, hello world! the hell of it: hello again";
  test::write_file(tmp_.path() / "text.txt", text);
  const CliResult r = plumb("perplexity --no-progress --context 8 --batch 3 --file " + (tmp_.path() / "text.txt").string());
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch sm;
  ASSERT_TRUE(std::regex_search(r.out, sm, std::regex(R"(perplexity +([0-9.]+)\n)"))) << r.out;
  // Each window of 8 scored alone as [BOS] + window, by one prefill here.
  const Tokenizer tok = Tokenizer::load(model_dir_.string());
  const std::vector<TokenId> ids = tok.encode(text);
  const std::unique_ptr<Model> m = load_model(model_dir_.string(), {"cpu", 2, Numerics::Reference});
  const auto V = static_cast<std::size_t>(m->config().vocab_size);
  double nll = 0;
  for (std::size_t t = 0; t < ids.size(); t += 8) {
    std::vector<TokenId> in = {static_cast<TokenId>(m->config().bos_token_id)};
    in.insert(in.end(), ids.begin() + t, ids.begin() + std::min(ids.size(), t + 8));
    const std::vector<float> logits = m->prompt_logits(in);
    for (std::size_t j = 0; j + 1 < in.size(); ++j) {
      double mx = -INFINITY, sum = 0;
      for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[j * V + v]));
      for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(logits[j * V + v]) - mx);
      nll += mx + std::log(sum) - logits[j * V + in[j + 1]];
    }
  }
  const double want = std::exp(nll / static_cast<double>(ids.size()));
  EXPECT_NEAR(std::stod(sm[1]), want, 1e-5 * want + 1e-5) << r.out;  // printed with 5 decimals
}

}  // namespace
}  // namespace plumb
