// Loading: unsupported tokenizer.json features are rejected by name, bad input gives clear
// errors, and BOS comes only on request.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"
#include "synthetic_tokenizer.h"
#include "test_tokenizers.h"

namespace plumb {
namespace {

// Runs `f`, expecting a plumb::Error whose message contains `needle`.
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

void expect_rejected(const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
  nlohmann::json j = test::synthetic_tokenizer_json();
  edit(j);
  expect_error([&] { Tokenizer::from_json_text(j.dump(), "", "edited.json"); }, needle);
}

TEST(TokenizerLoad, RejectsUnsupportedComponentsByName) {
  expect_rejected([](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer type \"NFKC\"");
  expect_rejected([](auto& j) { j["normalizer"]["normalizers"] = {{{"type", "Lowercase"}}}; }, "\"Lowercase\"");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}}; }, "\"Whitespace\"");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, "\"Removed\"");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }, "invert");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; }, "use_regex");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}}; },
                  "cannot compile regex /(unclosed/");
  expect_rejected([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder type \"WordPiece\"");
  expect_rejected([](auto& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, "\"TemplateProcessing\"");
  expect_rejected([](auto& j) { j["model"]["type"] = "Unigram"; }, "model type \"Unigram\"");
  expect_rejected([](auto& j) { j["model"]["merges"].push_back("x y z"); }, "model.merges[5]");
  expect_rejected([](auto& j) { j["model"]["merges"].push_back("q zz"); }, "missing from the vocab");
  expect_rejected([](auto& j) { j["model"]["vocab"].erase("Ġ"); }, "byte 0x20");
  expect_error([] { Tokenizer::from_json_text("{\"model\": ", "", "broken.json"); }, "broken.json: invalid JSON");
}

// Issue #19: ids index the per-id tables, so hostile ones must be refused before those are sized
// (4294967295 and -1 crashed in build_id_tables; 300,000,000 took 10 GB before anything was said).
TEST(TokenizerLoad, RefusesIdsBeyondTheLimitBeforeAllocating) {
  expect_rejected([](auto& j) { j["model"]["vocab"]["huge"] = 4294967295u; }, "model.vocab[\"huge\"] = 4294967295 is too large");
  expect_rejected([](auto& j) { j["model"]["vocab"]["big"] = 50000000; }, "token ids must be below 2097152");
  expect_rejected([](auto& j) { j["model"]["vocab"]["neg"] = -1; }, "model.vocab[\"neg\"] is not a token id");
  for (const nlohmann::json& id : {nlohmann::json(4294967295u), nlohmann::json(-1), nlohmann::json(300000000),
                                   nlohmann::json(2097152), nlohmann::json(1.5), nlohmann::json("7")})
    expect_rejected([&](auto& j) { j["added_tokens"].push_back({{"id", id}, {"content", "<x>"}}); },
                    "added_tokens[0].id must be an integer in [0, 2097152), got " + id.dump());
  // The largest accepted id loads and round-trips.
  nlohmann::json j = test::synthetic_tokenizer_json();
  j["added_tokens"].push_back(test::added_token(2097151, "<last>"));
  const Tokenizer t = Tokenizer::from_json_text(j.dump(), "", "edge.json");
  EXPECT_EQ(t.encode("<last>"), std::vector<std::uint32_t>{2097151});
  EXPECT_EQ(t.id_limit(), 2097152u);
}

// 100,000 added tokens of 1 KB took over 60 s and 6.4 GB (one trie node per content byte): their
// total size is bounded, and the error comes as soon as the bound is passed.
TEST(TokenizerLoad, RefusesAddedTokensBeyondTheSizeLimit) {
  nlohmann::json j = test::synthetic_tokenizer_json();
  for (std::uint32_t i = 0; i < 5000; ++i)
    j["added_tokens"].push_back(test::added_token(300 + i, std::to_string(i) + std::string(1024, 'x')));
  expect_error([&] { Tokenizer::from_json_text(j.dump(), "", "many.json"); },
               "many.json: added_tokens: the contents of the first 4082 tokens total more than the 4194304 bytes");
}

TEST(TokenizerLoad, RefusesFifosAndDirectoriesAsFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("plumb-tok-fifo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "model");
  ASSERT_EQ(::mkfifo((dir / "model" / "tokenizer.json").c_str(), 0600), 0);
  expect_error([&] { Tokenizer::load((dir / "model").string()); }, "the tokenizer file is a FIFO");
  std::filesystem::remove(dir / "model" / "tokenizer.json");
  std::filesystem::create_directories(dir / "model" / "tokenizer.json");
  expect_error([&] { Tokenizer::load((dir / "model" / "tokenizer.json").string()); }, "tokenizer not found");
  std::filesystem::remove_all(dir);
}

TEST(TokenizerLoad, MissingFileNamesThePath) {
  expect_error([] { Tokenizer::load("/nonexistent/model-dir"); }, "tokenizer not found: /nonexistent/model-dir (expected a tokenizer.json or a directory holding one)");
}

TEST(TokenizerLoad, BadInputAndIds) {
  Tokenizer t = Tokenizer::from_json_text(test::synthetic_tokenizer_json().dump(), "", "synthetic");
  expect_error([&] { t.encode("ok\xFF"); }, "not valid UTF-8 (byte 2 of 3)");
  std::vector<std::uint32_t> bad = {104, 261};
  expect_error([&] { t.decode(bad); }, "token id 261 is out of range (this tokenizer has ids 0..260)");
  expect_error([&] { t.encode("hi", /*add_bos=*/true); }, "no bos_token");
}

TEST(TokenizerLoad, BosOnlyOnRequest) {
  const Tokenizer& v3 = test::deepseek_v3();
  const Tokenizer& v4 = test::deepseek_v4();
  EXPECT_EQ(v3.bos_id(), 0u);
  EXPECT_EQ(v3.eos_id(), 1u);
  EXPECT_EQ(v4.bos_id(), 0u);
  EXPECT_EQ(v4.eos_id(), 1u);
  EXPECT_EQ(v4.encode("Hello"), (std::vector<std::uint32_t>{19923}));
  EXPECT_EQ(v4.encode("Hello", /*add_bos=*/true), (std::vector<std::uint32_t>{0, 19923}));
  EXPECT_EQ(v4.id_limit(), 129280u);
  EXPECT_EQ(v3.id_limit(), 128815u);
}

TEST(TokenizerLoad, ModelDirectoryOrFile) {
  auto dir = std::filesystem::temp_directory_path() / "plumb_tokenizer_load_test";
  test::write_v4_dir(dir);
  Tokenizer from_dir = Tokenizer::load(dir.string());
  Tokenizer from_file = Tokenizer::load((dir / "tokenizer.json").string());
  EXPECT_EQ(from_dir.encode("<think>x</think>"), from_file.encode("<think>x</think>"));
  EXPECT_EQ(from_dir.encode("<think>"), (std::vector<std::uint32_t>{128821}));
  EXPECT_EQ(from_file.bos_id(), 0u);
  std::filesystem::remove_all(dir);
}

// Characters assigned in Unicode 15-16 are known to HF tokenizers (0.23.2, Oniguruma) but not to
// PCRE2 10.42's tables; the expected ids were produced by HF tokenizers 0.23.2 on the H200 machine.
// U+20C1 is from Unicode 17, which HF does not know yet either: it stays unassigned.
TEST(TokenizerLoad, NewerUnicodeSplitsLikeHuggingFace) {
  const Tokenizer& v3 = test::deepseek_v3();
  using Ids = std::vector<std::uint32_t>;
  EXPECT_EQ(v3.encode("I \U0001FAE8 you"), (Ids{43, 7351, 107, 104, 440}));
  EXPECT_EQ(v3.encode("face \U0001FAE9 x"), (Ids{2699, 7351, 107, 105, 1527}));
  EXPECT_EQ(v3.encode("\u0897a \u1B4E b"), (Ids{159, 98, 248, 67, 8751, 258, 239, 291}));
  EXPECT_EQ(v3.encode("\u20c0 \u20c1 1"), (Ids{23368, 225, 223, 23368, 226, 223, 19}));
  EXPECT_EQ(v3.encode("a\u0085b c"), (Ids{67, 129, 230, 68, 274}));
  EXPECT_EQ(v3.encode("x \u180e y"), (Ids{90, 223, 115522, 239, 383}));
}

}  // namespace
}  // namespace plumb
