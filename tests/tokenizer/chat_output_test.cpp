// Completion parsing (reasoning / content / DSML tool calls), whole and streamed in every split,
// including the failure modes of CHAT-ENCODING.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plumb/tokenizer/chat_output.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">{\"n\": [1, 2]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

// Streams `text` in pieces of `step` bytes (cutting through markers and characters' bytes is
// fine: the parser works on bytes) and checks that the deltas add up to the whole parse.
ParsedCompletion streamed(const std::string& text, ChatMode mode, bool tools, bool ended_by_model, std::size_t step) {
  CompletionParser parser(mode, tools);
  std::string reasoning, content;
  for (std::size_t at = 0; at < text.size(); at += step) {
    auto d = parser.push(std::string_view(text).substr(at, step));
    reasoning += d.reasoning, content += d.content;
  }
  CompletionParser::Delta last;
  ParsedCompletion p = parser.finish(ended_by_model, last);
  reasoning += last.reasoning, content += last.content;
  if (!p.answer_was_reasoning) {
    EXPECT_EQ(reasoning, p.reasoning) << "step " << step;
    EXPECT_EQ(content, p.content) << "step " << step;
  }
  return p;
}

void expect_all_splits(const std::string& text, ChatMode mode, bool tools, bool ended, const std::string& reasoning,
                       const std::string& content, std::size_t calls) {
  for (std::size_t step = 1; step <= text.size(); ++step) {
    ParsedCompletion p = streamed(text, mode, tools, ended, step);
    ASSERT_EQ(p.reasoning, reasoning) << "step " << step;
    ASSERT_EQ(p.content, content) << "step " << step;
    ASSERT_EQ(p.tool_calls.size(), calls) << "step " << step << " " << p.tool_error;
  }
}

TEST(ChatOutput, ReasoningThenAnswerWithoutEosText) {
  expect_all_splits("I think</think>Light." + kEos, ChatMode::kThinking, false, true, "I think", "Light.", 0);
  expect_all_splits("Light." + kEos, ChatMode::kChat, false, true, "", "Light.", 0);
  // In chat mode "</think>" is just text.
  expect_all_splits("a</think>b", ChatMode::kChat, false, true, "", "a</think>b", 0);
}

TEST(ChatOutput, ToolCallsParsedInEverySplit) {
  expect_all_splits("Let me see." + kCall + kEos, ChatMode::kChat, true, true, "", "Let me see.", 1);
  ParsedCompletion p = parse_completion("ok" + kCall, ChatMode::kChat, true, true);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get");
  EXPECT_EQ(nlohmann::json::parse(p.tool_calls[0].arguments), nlohmann::json::parse(R"({"city": "Rome", "days": {"n": [1, 2]}})"));
  // Without tools offered, the same text is content.
  EXPECT_EQ(parse_completion("ok" + kCall, ChatMode::kChat, false, true).content, "ok" + kCall);
}

TEST(ChatOutput, ToolCallsWithoutThinkEndAreNotDropped) {
  // Failure mode: the model starts the tool-calls block without closing its reasoning.
  expect_all_splits("I should call get." + kCall + kEos, ChatMode::kThinking, true, true, "I should call get.", "", 1);
}

TEST(ChatOutput, NoThinkEndMeansTheTextIsTheAnswer) {
  // Failure mode: no "</think>" at all; the answer must not vanish into the reasoning.
  ParsedCompletion p = parse_completion("Light is good." + kEos, ChatMode::kThinking, false, true);
  EXPECT_EQ(p.content, "Light is good.");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_TRUE(p.answer_was_reasoning);
  // Cut off by the length limit it is still unfinished reasoning.
  ParsedCompletion cut = parse_completion("Light is", ChatMode::kThinking, false, false);
  EXPECT_EQ(cut.reasoning, "Light is");
  EXPECT_EQ(cut.content, "");
}

TEST(ChatOutput, MalformedToolCallsBecomeContentWithTheError) {
  const std::string broken[] = {
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<｜DSML｜parameter name=\"x\" string=\"maybe\">1</｜DSML｜parameter>",
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<｜DSML｜parameter name=\"x\" string=\"false\">{bad</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      "\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>",
      kCall + "trailing text",
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<｜DSML｜parameter name=\"x\" string=\"true\">1</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"x\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"};
  for (const std::string& text : broken) {
    ParsedCompletion p = parse_completion("pre" + text, ChatMode::kChat, true, true);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_FALSE(p.tool_error.empty()) << text;
    EXPECT_EQ(p.content, "pre" + text);
  }
}

TEST(ChatOutput, ParseDsmlDirectly) {
  auto calls = parse_dsml_tool_calls(kCall.substr(kCall.find('>') + 1) + "\n");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THROW(parse_dsml_tool_calls("\n<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"), Error);
}

// Found by chat_output_fuzz: inside a tool-calls block, an EOS marker split across two streamed
// pieces was not recognized, so its text joined the block (and, the block being malformed, the
// content). Every split must give the whole parse, without EOS text.
TEST(ChatOutput, EosSplitInsideAToolCallsBlockIsStillEos) {
  const std::string text = "I will call\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<bad>" + kEos;
  const ParsedCompletion whole = parse_completion(text, ChatMode::kThinking, true, true);
  ASSERT_FALSE(whole.tool_error.empty());
  EXPECT_EQ(whole.content.find(kEos), std::string::npos) << whole.content;
  for (std::size_t step = 1; step <= text.size(); ++step) {
    const ParsedCompletion p = streamed(text, ChatMode::kThinking, true, true, step);
    EXPECT_EQ(p.content, whole.content) << "step " << step;
    EXPECT_EQ(p.tool_error, whole.tool_error) << "step " << step;
  }
}

// Found by chat_output_fuzz: the error quoted the first 40 bytes of the text, which cut a CJK
// character in two (invalid UTF-8 in a message that is printed and may be written into JSON).
TEST(ChatOutput, ErrorsQuoteWholeCharacters) {
  for (const std::string text : {"想一想</think>起初神创造天地。", "<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>起初神创造天地。起初神创造天地。"}) {
    try {
      parse_dsml_tool_calls(text);
      FAIL() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_TRUE(utf8::is_valid(e.what())) << e.what();
      EXPECT_NE(std::string(e.what()).find("起初"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace plumb
