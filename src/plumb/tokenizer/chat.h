#pragma once
// DeepSeek-V4 prompt encoding (MODEL-SPEC 3.11, the release's encoding/README.md):
//
//   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜></think>{answer}<｜end▁of▁sentence｜>
//   <｜User｜>{user}<｜Assistant｜><think>          (thinking mode)
//                          ...<｜Assistant｜></think>         (chat mode)
//
// Earlier assistant turns carry only their answer, after "</think>", and end with EOS: reasoning
// from earlier turns is not sent back, in either mode. Generation stops at EOS. The prompt text is
// tokenized as a whole, like the reference encoder, so special-token text inside messages is
// recognized as those tokens.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/tokenizer/tokenizer.h"

namespace plumb {

enum class ChatMode { kThinking, kChat };

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant };
  Role role;
  std::string content;
};

// The prompt text for `messages`, ending with the generation prompt for the next assistant turn.
// System messages may only come first (several are joined by a blank line); the last message must
// be from the user. Throws plumb::Error otherwise.
std::string render_chat_prompt(std::span<const ChatMessage> messages, ChatMode mode);

// render_chat_prompt() tokenized with `tokenizer` (no extra BOS: the text starts with it).
std::vector<std::uint32_t> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, ChatMode mode);

// The answer part of a generated assistant turn: the text after the first "</think>" when there
// is one (thinking mode), else everything; a trailing EOS marker is removed. This is what goes
// back into the history.
std::string answer_of_completion(std::string_view completion);

}  // namespace plumb
