#pragma once
// The DeepSeek-V4 chat encoding's marker strings (exact: the fullwidth bars and ▁ are part of
// them), shared by the prompt renderer and the completion parser.
#include <string_view>

namespace plumb::chat_tokens {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";
// Where the content of an assistant turn ends and its tool calls begin.
constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls>";

}  // namespace plumb::chat_tokens
