// DeepSeek-V4 chat encoding against hand-written id sequences (V4-Flash tokenizer). Ids used:
// BOS 0, EOS 1, <｜User｜> 128803, <｜Assistant｜> 128804, <think> 128821, </think> 128822, and the
// words "question" 20072, "answer" 19995, "Hello" 19923, "你好" 30594.
#include <gtest/gtest.h>

#include "plumb/tokenizer/chat.h"
#include "plumb/util/error.h"
#include "test_tokenizers.h"

namespace plumb {
namespace {

using Ids = std::vector<std::uint32_t>;
using Role = ChatMessage::Role;

constexpr std::uint32_t kBos = 0, kEos = 1, kUser = 128803, kAssistant = 128804, kThink = 128821, kThinkEnd = 128822;
constexpr std::uint32_t kQuestion = 20072, kAnswer = 19995, kHello = 19923, kNiHao = 30594;

Ids encode(std::vector<ChatMessage> messages, ChatMode mode) { return encode_chat(test::deepseek_v4(), messages, mode); }

TEST(ChatEncoding, SingleTurnThinkingAndChat) {
  std::vector<ChatMessage> one = {{Role::kUser, "question"}};
  EXPECT_EQ(encode(one, ChatMode::kThinking), (Ids{kBos, kUser, kQuestion, kAssistant, kThink}));
  EXPECT_EQ(encode(one, ChatMode::kChat), (Ids{kBos, kUser, kQuestion, kAssistant, kThinkEnd}));
  EXPECT_EQ(render_chat_prompt(one, ChatMode::kThinking), "<｜begin▁of▁sentence｜><｜User｜>question<｜Assistant｜><think>");
}

TEST(ChatEncoding, SystemPromptFollowsBos) {
  std::vector<ChatMessage> messages = {{Role::kSystem, "Hello"}, {Role::kUser, "question"}};
  EXPECT_EQ(encode(messages, ChatMode::kChat), (Ids{kBos, kHello, kUser, kQuestion, kAssistant, kThinkEnd}));
  std::vector<ChatMessage> two_systems = {{Role::kSystem, "A"}, {Role::kSystem, "B"}, {Role::kUser, "x"}};
  // The release's encoder writes consecutive system messages back to back, with no separator.
  EXPECT_EQ(render_chat_prompt(two_systems, ChatMode::kChat), "<｜begin▁of▁sentence｜>AB<｜User｜>x<｜Assistant｜></think>");
}

TEST(ChatEncoding, EarlierAssistantTurnsEndWithEos) {
  std::vector<ChatMessage> messages = {
      {Role::kUser, "question"}, {Role::kAssistant, "answer"}, {Role::kUser, "你好"}};
  Ids history = {kBos, kUser, kQuestion, kAssistant, kThinkEnd, kAnswer, kEos, kUser, kNiHao, kAssistant};
  Ids chat = history, thinking = history;
  chat.push_back(kThinkEnd);
  thinking.push_back(kThink);
  EXPECT_EQ(encode(messages, ChatMode::kChat), chat);
  // In thinking mode too, the earlier answer follows "</think>": its reasoning is not sent back.
  EXPECT_EQ(encode(messages, ChatMode::kThinking), thinking);
}

TEST(ChatEncoding, ThreeTurnsWithSystem) {
  std::vector<ChatMessage> messages = {{Role::kSystem, "Hello"},     {Role::kUser, "question"},
                                       {Role::kAssistant, "answer"}, {Role::kUser, "question"},
                                       {Role::kAssistant, "Hello"},  {Role::kUser, "answer"}};
  EXPECT_EQ(encode(messages, ChatMode::kThinking),
            (Ids{kBos, kHello, kUser, kQuestion, kAssistant, kThinkEnd, kAnswer, kEos, kUser, kQuestion, kAssistant,
                 kThinkEnd, kHello, kEos, kUser, kAnswer, kAssistant, kThink}));
}

TEST(ChatEncoding, MatchesThePublishedProbeLayout) {
  // Probe 3 of probes.json is a full thinking-mode exchange written as text.
  EXPECT_EQ(test::deepseek_v4().encode("<｜begin▁of▁sentence｜><｜User｜>question<｜Assistant｜><think>"),
            encode({{Role::kUser, "question"}}, ChatMode::kThinking));
}

TEST(ChatEncoding, AnswerOfCompletion) {
  EXPECT_EQ(answer_of_completion("reason</think>answer<｜end▁of▁sentence｜>"), "answer");
  EXPECT_EQ(answer_of_completion("plain answer"), "plain answer");
  EXPECT_EQ(answer_of_completion("a</think>b</think>c"), "b</think>c");
}

TEST(ChatEncoding, RejectsMalformedConversations) {
  EXPECT_THROW(render_chat_prompt({}, ChatMode::kChat), Error);
  std::vector<ChatMessage> ends_with_assistant = {{Role::kUser, "q"}, {Role::kAssistant, "a"}};
  EXPECT_THROW(render_chat_prompt(ends_with_assistant, ChatMode::kChat), Error);
  std::vector<ChatMessage> late_system = {{Role::kUser, "q"}, {Role::kSystem, "s"}, {Role::kUser, "q"}};
  EXPECT_THROW(render_chat_prompt(late_system, ChatMode::kChat), Error);
}

}  // namespace
}  // namespace plumb
