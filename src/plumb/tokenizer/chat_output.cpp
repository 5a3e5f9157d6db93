#include "plumb/tokenizer/chat_output.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "plumb/tokenizer/chat_tokens.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using namespace chat_tokens;

// At most `n` bytes of `s` for an error message, never ending inside a UTF-8 character (the
// message is shown and may be written into JSON).
std::string_view quote(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::string_view head = s.substr(0, n);
  head.remove_suffix(utf8::incomplete_tail(head));
  return head;
}

void skip_space(std::string_view& s) {
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
}

// Consumes `token` (after optional whitespace) or fails naming what was expected.
void expect(std::string_view& s, std::string_view token, std::string_view what) {
  skip_space(s);
  if (!s.starts_with(token)) fail("tool calls: expected {} but found '{}'", what, quote(s, 40));
  s.remove_prefix(token.size());
}

// `name="VALUE"` after optional spaces: VALUE.
std::string attribute(std::string_view& s, std::string_view name) {
  expect(s, std::string(name) + "=\"", fmt::format("attribute {}=\"...\"", name));
  std::size_t end = s.find('"');
  if (end == std::string_view::npos) fail("tool calls: attribute {} is not closed", name);
  std::string value(s.substr(0, end));
  s.remove_prefix(end + 1);
  return value;
}

ToolCall parse_invoke(std::string_view& s) {
  ToolCall call;
  call.name = attribute(s, "name");
  if (call.name.empty()) fail("tool calls: an invoke has an empty name");
  expect(s, ">", "'>' after the invoke name");
  const std::string param_open = fmt::format("<{}parameter", kDsml), param_close = fmt::format("</{}parameter>", kDsml);
  const std::string invoke_close = fmt::format("</{}invoke>", kDsml);
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (;;) {
    skip_space(s);
    if (s.starts_with(invoke_close)) {
      s.remove_prefix(invoke_close.size());
      break;
    }
    expect(s, param_open, fmt::format("'{}' or '{}'", param_open, invoke_close));
    std::string key = attribute(s, "name");
    std::string is_string = attribute(s, "string");
    if (is_string != "true" && is_string != "false")
      fail("tool calls: parameter {} has string=\"{}\" (expected true or false)", key, is_string);
    expect(s, ">", "'>' after the parameter attributes");
    std::size_t end = s.find(param_close);
    if (end == std::string_view::npos) fail("tool calls: parameter {} is not closed", key);
    std::string_view value = s.substr(0, end);
    s.remove_prefix(end + param_close.size());
    if (args.contains(key)) fail("tool calls: duplicate parameter {}", key);
    if (is_string == "true") {
      args[key] = std::string(value);
    } else {
      try {
        args[key] = nlohmann::ordered_json::parse(value);
      } catch (const nlohmann::json::exception&) {
        fail("tool calls: parameter {} has string=\"false\" but its value is not JSON: '{}'", key, quote(value, 80));
      }
    }
  }
  call.arguments = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return call;
}

// The length of the longest suffix of `text` that is a proper prefix of one of `markers`.
std::size_t partial_marker(std::string_view text, std::initializer_list<std::string_view> markers) {
  std::size_t best = 0;
  for (std::string_view m : markers)
    for (std::size_t n = std::min(text.size(), m.size() - 1); n > best; --n)
      if (text.ends_with(m.substr(0, n))) {
        best = n;
        break;
      }
  return best;
}

}  // namespace

std::vector<ToolCall> parse_dsml_tool_calls(std::string_view s) {
  const std::string invoke_open = fmt::format("<{}invoke", kDsml), block_close = fmt::format("</{}tool_calls>", kDsml);
  std::vector<ToolCall> calls;
  for (;;) {
    skip_space(s);
    if (s.starts_with(block_close)) {
      s.remove_prefix(block_close.size());
      break;
    }
    if (s.empty()) fail("tool calls: the block ends without '{}'", block_close);
    expect(s, invoke_open, fmt::format("'{}' or '{}'", invoke_open, block_close));
    calls.push_back(parse_invoke(s));
  }
  skip_space(s);
  if (s.ends_with(kEos)) s.remove_suffix(kEos.size());
  skip_space(s);
  if (!s.empty()) fail("tool calls: text after the block: '{}'", quote(s, 40));
  if (calls.empty()) fail("tool calls: the block has no invoke");
  return calls;
}

CompletionParser::CompletionParser(ChatMode mode, bool tools)
    : phase_(mode == ChatMode::kThinking ? Phase::kReasoning : Phase::kContent), tools_(tools),
      reasoning_open_(mode == ChatMode::kThinking) {}

void CompletionParser::emit(std::string_view text, Delta& delta) {
  if (text.empty()) return;
  switch (phase_) {
    case Phase::kReasoning:
      delta.reasoning += text;
      result_.reasoning += text;
      break;
    case Phase::kContent:
      delta.content += text;
      result_.content += text;
      break;
    case Phase::kTools:
      block_ += text;
      break;
    case Phase::kDone:
      break;
  }
}

CompletionParser::Delta CompletionParser::push(std::string_view text) {
  Delta delta;
  std::string buffer = std::move(pending_) + std::string(text);
  pending_.clear();
  std::string_view rest = buffer;
  while (!rest.empty() && phase_ != Phase::kDone) {
    if (phase_ == Phase::kTools) {
      // Inside the block only EOS matters; the block is parsed at the end. A piece may end
      // inside the EOS marker: hold that back too, or the marker's text would join the block.
      const std::size_t eos = rest.find(kEos);
      if (eos != std::string_view::npos) {
        emit(rest.substr(0, eos), delta);
        phase_ = Phase::kDone;
        return delta;
      }
      const std::size_t hold = partial_marker(rest, {kEos});
      emit(rest.substr(0, rest.size() - hold), delta);
      pending_ = std::string(rest.substr(rest.size() - hold));
      return delta;
    }
    // The earliest marker that ends this phase.
    struct Marker {
      std::string_view text;
      Phase next;
    };
    std::vector<Marker> markers = {{kEos, Phase::kDone}};
    if (phase_ == Phase::kReasoning) markers.push_back({kThinkEnd, Phase::kContent});
    if (tools_) markers.push_back({kToolCallsStart, Phase::kTools});
    std::size_t at = std::string_view::npos;
    const Marker* hit = nullptr;
    for (const Marker& m : markers)
      if (std::size_t p = rest.find(m.text); p < at) at = p, hit = &m;
    if (!hit) {
      std::size_t hold = partial_marker(rest, {kEos, kThinkEnd, tools_ ? kToolCallsStart : kEos});
      emit(rest.substr(0, rest.size() - hold), delta);
      pending_ = std::string(rest.substr(rest.size() - hold));
      return delta;
    }
    emit(rest.substr(0, at), delta);
    rest.remove_prefix(at + hit->text.size());
    if (hit->next != Phase::kDone) reasoning_open_ = false;
    phase_ = hit->next;
  }
  return delta;
}

ParsedCompletion CompletionParser::finish(bool ended_by_model, Delta& last) {
  emit(pending_, last);
  pending_.clear();
  if (reasoning_open_ && ended_by_model) {
    // The model ended without "</think>": what it wrote is its answer.
    result_.content = std::move(result_.reasoning);
    result_.reasoning.clear();
    result_.answer_was_reasoning = true;
  }
  if (!block_.empty() || phase_ == Phase::kTools) {
    try {
      result_.tool_calls = parse_dsml_tool_calls(block_);
    } catch (const Error& e) {
      result_.tool_error = e.what();
      std::string raw = std::string(kToolCallsStart) + block_;
      result_.content += raw;
      last.content += raw;
    }
  }
  phase_ = Phase::kDone;
  return std::move(result_);
}

ParsedCompletion parse_completion(std::string_view text, ChatMode mode, bool tools, bool ended_by_model) {
  CompletionParser parser(mode, tools);
  CompletionParser::Delta ignored;
  parser.push(text);
  return parser.finish(ended_by_model, ignored);
}

}  // namespace plumb
