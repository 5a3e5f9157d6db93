// libFuzzer target for the generated side of the V4 chat encoding: the DSML tool-call parser and
// the completion parser that splits reasoning, content and tool calls. The first input byte picks
// the mode (thinking or chat), whether tools were offered, whether the model ended the text, and
// where the rest is cut into streaming pieces. It checks:
// - parse_dsml_tool_calls returns calls with a name and JSON-object arguments, or throws plumb::Error;
// - streaming the text in pieces gives exactly the result of parsing it at once, and the pieces
//   the parser hands out add up to the reasoning and the content it returns;
// - valid UTF-8 in gives valid UTF-8 out (the server writes every field into JSON);
// - a malformed tool-calls block is never dropped: its text is in the content.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "plumb/tokenizer/chat_output.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace {

void check_calls(const std::vector<plumb::ToolCall>& calls, bool utf8_in) {
  for (const plumb::ToolCall& call : calls) {
    if (call.name.empty()) std::abort();
    if (utf8_in && !(plumb::utf8::is_valid(call.name) && plumb::utf8::is_valid(call.arguments))) std::abort();
    // The arguments are a JSON object as text (invalid UTF-8 inside was replaced, so it parses).
    if (!nlohmann::json::accept(call.arguments) || !nlohmann::json::parse(call.arguments).is_object()) std::abort();
  }
}

bool same(const plumb::ParsedCompletion& a, const plumb::ParsedCompletion& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.tool_error != b.tool_error ||
      a.answer_was_reasoning != b.answer_was_reasoning || a.tool_calls.size() != b.tool_calls.size())
    return false;
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].name != b.tool_calls[i].name || a.tool_calls[i].arguments != b.tool_calls[i].arguments) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::uint8_t knobs = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool utf8_in = plumb::utf8::is_valid(text);
  const plumb::ChatMode mode = (knobs & 1) ? plumb::ChatMode::kThinking : plumb::ChatMode::kChat;
  const bool tools = knobs & 2, ended_by_model = knobs & 4;
  const std::size_t piece = 1 + (knobs >> 3);  // 1..32 bytes per streamed piece

  try {
    check_calls(plumb::parse_dsml_tool_calls(text), utf8_in);
  } catch (const plumb::Error& e) {
    if (utf8_in && !plumb::utf8::is_valid(e.what())) std::abort();  // the message quotes the input
  }

  const plumb::ParsedCompletion whole = plumb::parse_completion(text, mode, tools, ended_by_model);
  plumb::CompletionParser parser(mode, tools);
  std::string reasoning, content;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    plumb::CompletionParser::Delta d = parser.push(text.substr(at, piece));
    reasoning += d.reasoning, content += d.content;
  }
  plumb::CompletionParser::Delta last;
  const plumb::ParsedCompletion streamed = parser.finish(ended_by_model, last);
  reasoning += last.reasoning, content += last.content;
  if (!same(whole, streamed)) std::abort();
  // The streamed pieces are what the result holds. When the answer turns out to have been the
  // reasoning (thinking mode, no "</think>", ended by the model), it was streamed as reasoning
  // and is returned as the content.
  const bool moved = streamed.answer_was_reasoning;
  if (moved ? !(streamed.reasoning.empty() && content.empty() && streamed.content == reasoning)
            : (reasoning != streamed.reasoning || content != streamed.content))
    std::abort();
  check_calls(streamed.tool_calls, utf8_in);
  if (!streamed.tool_error.empty() && streamed.content.find("<｜DSML｜tool_calls>") == std::string::npos) std::abort();
  if (utf8_in && !(plumb::utf8::is_valid(streamed.reasoning) && plumb::utf8::is_valid(streamed.content) &&
                   plumb::utf8::is_valid(streamed.tool_error)))
    std::abort();
  return 0;
}
