#pragma once
// The generated side of the DeepSeek-V4 chat encoding: an assistant completion split into
// reasoning, content and DSML tool calls, incrementally (for streaming) or at once. In thinking
// mode the reasoning runs to "</think>"; the content runs to EOS or to the tool-calls block
// ("\n\n<｜DSML｜tool_calls>"), which is parsed when generation ends. Lenient where models are
// known to slip (CHAT-ENCODING.md, failure modes):
// - a tool-calls block that starts before "</think>" still ends the reasoning and is parsed;
// - a completion that ends by itself without "</think>" is the answer, not reasoning (a length
//   stop keeps it as reasoning: the thinking was cut short);
// - EOS text never reaches the output; a malformed tool-calls block is returned as content
//   with the parse error, never dropped.
#include <string>
#include <string_view>
#include <vector>

#include "plumb/tokenizer/chat.h"

namespace plumb {

// Parses the text after "<｜DSML｜tool_calls>" (up to and including its closing tag and
// optionally trailing whitespace) into calls with JSON-object arguments. Throws plumb::Error
// naming what is malformed.
std::vector<ToolCall> parse_dsml_tool_calls(std::string_view block);

struct ParsedCompletion {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;
  std::string tool_error;             // a tool-calls block was present but malformed
  bool answer_was_reasoning = false;  // the "never emitted </think>" case: `reasoning` moved to `content`
};

class CompletionParser {
 public:
  // `tools`: the request offered tools, so a tool-calls block is parsed (otherwise it is text).
  CompletionParser(ChatMode mode, bool tools);

  struct Delta {
    std::string reasoning, content;
  };
  // Newly generated text: the parts now final (text that may still be the start of a marker
  // is held back).
  Delta push(std::string_view text);
  // End of generation; `ended_by_model`: EOS or a stop (not a length limit or a cancel). `last`
  // receives what push() still held back.
  ParsedCompletion finish(bool ended_by_model, Delta& last);
  // Still inside the reasoning (thinking mode, before "</think>"): for reasoning token counts.
  bool in_reasoning() const { return phase_ == Phase::kReasoning; }

 private:
  enum class Phase { kReasoning, kContent, kTools, kDone };
  void emit(std::string_view text, Delta& delta);

  Phase phase_;
  bool tools_;
  bool reasoning_open_;  // thinking mode, and neither "</think>" nor a tool-calls block came yet
  std::string pending_, block_;
  ParsedCompletion result_;
};

// The whole completion at once (non-streaming responses).
ParsedCompletion parse_completion(std::string_view text, ChatMode mode, bool tools, bool ended_by_model);

}  // namespace plumb
