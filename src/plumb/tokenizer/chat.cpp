#include "plumb/tokenizer/chat.h"

#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

using Role = ChatMessage::Role;

// Appends the system messages at the start of `messages` and returns how many there were.
std::size_t append_system_prompt(std::span<const ChatMessage> messages, std::string& out) {
  std::size_t n = 0;
  for (; n < messages.size() && messages[n].role == Role::kSystem; ++n) {
    if (n > 0) out += "\n\n";
    out += messages[n].content;
  }
  return n;
}

}  // namespace

std::string render_chat_prompt(std::span<const ChatMessage> messages, ChatMode mode) {
  if (messages.empty() || messages.back().role != Role::kUser)
    fail("a chat prompt must end with a user message");
  std::string out(kBos);
  for (std::size_t i = append_system_prompt(messages, out); i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    switch (m.role) {
      case Role::kSystem:
        fail("message {}: system messages may only come before the conversation", i + 1);
      case Role::kUser:
        out.append(kUser).append(m.content);
        break;
      case Role::kAssistant:
        out.append(kAssistant).append(kThinkEnd).append(m.content).append(kEos);
        break;
    }
  }
  out.append(kAssistant).append(mode == ChatMode::kThinking ? kThinkStart : kThinkEnd);
  return out;
}

std::vector<std::uint32_t> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, ChatMode mode) {
  return tokenizer.encode(render_chat_prompt(messages, mode));
}

std::string answer_of_completion(std::string_view completion) {
  if (std::size_t end = completion.find(kThinkEnd); end != std::string_view::npos)
    completion.remove_prefix(end + kThinkEnd.size());
  if (completion.ends_with(kEos)) completion.remove_suffix(kEos.size());
  return std::string(completion);
}

}  // namespace plumb
