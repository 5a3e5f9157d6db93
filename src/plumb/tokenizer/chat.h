#pragma once
// DeepSeek-V4 prompt encoding (MODEL-SPEC 3.11, ../shared/design/CHAT-ENCODING.md; the release's
// encoding_dsv4 encoder, rewritten):
//
//   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜></think>{answer}<｜end▁of▁sentence｜>
//   <｜User｜>{user}<｜Assistant｜><think>          (thinking mode)
//                          ...<｜Assistant｜></think>         (chat mode)
//
// In thinking mode reasoning from turns before the last user message is dropped (and developer
// messages there too), unless the conversation has tools: then every turn keeps its reasoning
// and every user turn opens with <think>. Tool results (role tool) are merged into a user turn as
// <tool_result>...</tool_result>, ordered like the calls of the preceding assistant turn. Tools
// and the response format are rendered into the system (or developer) message that carries
// them. The prompt text is tokenized as a whole, like the reference encoder, so special-token
// text inside messages is recognized as those tokens.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/tokenizer/tokenizer.h"

namespace plumb {

enum class ChatMode { kThinking, kChat };

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text (OpenAI's function.arguments)
};

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant, kTool, kDeveloper, kLatestReminder };
  Role role;
  std::string content;
  // (Every further member has an initializer, so {role, content} stays a complete initializer.)
  std::string reasoning{};             // assistant: the reasoning of that turn
  std::vector<ToolCall> tool_calls{};  // assistant
  std::string tool_call_id{};          // tool: the call it answers
  bool unfinished = false;             // assistant: a prefill the model continues (no EOS)
  // system / developer: OpenAI function objects ({"name", "description", "parameters"}) and a
  // response format, rendered into this message.
  std::vector<nlohmann::ordered_json> tools{};
  std::optional<nlohmann::ordered_json> response_format{};
};

// Reasoning effort in thinking mode: kMax prepends the release's fixed instruction paragraph;
// kHigh (the default) adds nothing.
enum class ReasoningEffort { kHigh, kMax };

struct Conversation {
  std::vector<ChatMessage> messages;
  ChatMode mode = ChatMode::kChat;
  ReasoningEffort effort = ReasoningEffort::kHigh;
};

// The prompt text, BOS first. A conversation ending with a user, developer or tool turn ends
// with the generation prompt (<｜Assistant｜> and <think> or </think>). Throws plumb::Error on a
// conversation the encoding cannot express (an empty developer message, arguments that are not
// a JSON object).
std::string render_conversation(const Conversation& conversation);

// The strict form `plumb run` / `plumb chat` use: system messages only first, the last message
// from the user. Throws plumb::Error otherwise.
std::string render_chat_prompt(std::span<const ChatMessage> messages, ChatMode mode);

// render_chat_prompt() tokenized with `tokenizer` (no extra BOS: the text starts with it).
std::vector<std::uint32_t> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, ChatMode mode);

// The answer part of a generated assistant turn: the text after the first "</think>" when there
// is one (thinking mode), else everything; a trailing EOS marker is removed. This is what goes
// back into the history.
std::string answer_of_completion(std::string_view completion);

// JSON text the way the release's encoder writes it (Python's json.dumps with ensure_ascii off:
// ", " and ": " separators, keys in their given order, non-ASCII characters as they are).
std::string python_json(const nlohmann::ordered_json& value);

}  // namespace plumb
