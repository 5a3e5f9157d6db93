// Tokenization of the committed corpus must equal the goldens written by an independent
// implementation (@huggingface/tokenizers, tools/tokenizer-golden), ids and decoded text alike.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "plumb/tokenizer/decode_stream.h"
#include "plumb/tokenizer/utf8.h"
#include "test_tokenizers.h"

namespace plumb {
namespace {

using test::tokenizer_data;

struct GoldenLine {
  std::string text;
  std::vector<std::uint32_t> ids;
  std::string decoded;
};

std::vector<GoldenLine> load_goldens(const std::string& golden_file) {
  auto corpus = test::read_jsonl(tokenizer_data("corpus.jsonl"));
  auto goldens = test::read_jsonl(tokenizer_data(golden_file));
  EXPECT_EQ(corpus.size(), goldens.size());
  std::vector<GoldenLine> lines;
  for (std::size_t i = 0; i < corpus.size() && i < goldens.size(); ++i) {
    auto text = corpus[i].get<std::string>();
    auto decoded = goldens[i].value("decoded", text);
    lines.push_back({text, goldens[i]["ids"].get<std::vector<std::uint32_t>>(), decoded});
  }
  return lines;
}

void expect_goldens(const Tokenizer& tokenizer, const std::string& golden_file) {
  auto lines = load_goldens(golden_file);
  std::size_t tokens = 0, encode_mismatches = 0, decode_mismatches = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const GoldenLine& line = lines[i];
    tokens += line.ids.size();
    auto ids = tokenizer.encode(line.text);
    if (ids != line.ids && ++encode_mismatches <= 5)
      ADD_FAILURE() << golden_file << " line " << i + 1 << ": encode differs for " << nlohmann::json(line.text).dump()
                    << "\n  got      " << nlohmann::json(ids).dump() << "\n  expected " << nlohmann::json(line.ids).dump();
    if (tokenizer.decode(line.ids) != line.decoded && ++decode_mismatches <= 5)
      ADD_FAILURE() << golden_file << " line " << i + 1 << ": decode differs, expected "
                    << nlohmann::json(line.decoded).dump();
  }
  std::printf("[ golden   ] %s: %zu lines, %zu tokens compared; %zu encode and %zu decode mismatches\n",
              golden_file.c_str(), lines.size(), tokens, encode_mismatches, decode_mismatches);
  EXPECT_EQ(encode_mismatches, 0u);
  EXPECT_EQ(decode_mismatches, 0u);
  EXPECT_GT(lines.size(), 3000u);
}

TEST(TokenizerGolden, DeepSeekV3MatchesHuggingFace) { expect_goldens(test::deepseek_v3(), "deepseek-v3.golden.jsonl"); }

TEST(TokenizerGolden, DeepSeekV4FlashMatchesHuggingFace) {
  expect_goldens(test::deepseek_v4(), "deepseek-v4-flash.golden.jsonl");
}

TEST(TokenizerGolden, DeepSeekV4FlashPublishedProbes) {
  auto probes = nlohmann::json::parse(test::read_text(tokenizer_data("deepseek-v4-flash/probes.json")));
  ASSERT_EQ(probes.size(), 4u);
  for (const auto& probe : probes) {
    auto text = probe["text"].get<std::string>();
    EXPECT_EQ(test::deepseek_v4().encode(text), probe["ids"].get<std::vector<std::uint32_t>>()) << text;
    EXPECT_EQ(test::deepseek_v4().decode(probe["ids"].get<std::vector<std::uint32_t>>()), text);
  }
}

// Feeding the golden ids one at a time must only ever produce valid UTF-8, and the pieces must add
// up to the decode of the whole sequence.
void expect_streaming_matches_decode(const Tokenizer& tokenizer, const std::string& golden_file) {
  std::size_t chunks = 0, held_back = 0, failures = 0;
  auto lines = load_goldens(golden_file);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    StreamingDetokenizer stream(tokenizer);
    std::string streamed;
    for (std::uint32_t id : lines[i].ids) {
      std::string chunk = stream.push(id);
      if (!utf8::is_valid(chunk) && ++failures <= 5) ADD_FAILURE() << "line " << i + 1 << ": invalid UTF-8 chunk";
      held_back += chunk.empty() && !tokenizer.token_bytes(id).empty();
      chunks += !chunk.empty();
      streamed += chunk;
    }
    streamed += stream.finish();
    if (streamed != lines[i].decoded && ++failures <= 5) ADD_FAILURE() << "line " << i + 1 << ": streamed text differs";
  }
  std::printf("[ stream   ] %s: %zu lines, %zu chunks, %zu tokens held back for an incomplete character\n",
              golden_file.c_str(), lines.size(), chunks, held_back);
  EXPECT_EQ(failures, 0u);
  EXPECT_GT(held_back, 0u);  // the corpus does split characters across tokens
}

TEST(StreamingDetokenizer, DeepSeekV3CorpusIsValidUtf8) {
  expect_streaming_matches_decode(test::deepseek_v3(), "deepseek-v3.golden.jsonl");
}

TEST(StreamingDetokenizer, DeepSeekV4FlashCorpusIsValidUtf8) {
  expect_streaming_matches_decode(test::deepseek_v4(), "deepseek-v4-flash.golden.jsonl");
}

// Load time is reported, not asserted (a timed assertion fails on a loaded CI machine and proves
// nothing about speed); the id table is what the test checks.
TEST(TokenizerLoad, RealTokenizerJsonLoads) {
  auto start = std::chrono::steady_clock::now();
  Tokenizer t = Tokenizer::load(test::v3_tokenizer("tokenizer.json"));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ load     ] deepseek-v3/tokenizer.json (7.8 MB): %.3f s, %zu ids\n", seconds, t.id_limit());
  EXPECT_EQ(t.id_limit(), 128815u);
}

}  // namespace
}  // namespace plumb
