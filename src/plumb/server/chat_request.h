#pragma once
// The chat-specific part of a /v1/chat/completions body: messages (roles system, user,
// assistant, tool, developer), tools, response_format, thinking (chat_template_kwargs.thinking,
// reasoning_effort) read into a Conversation for the V4 encoding. Throws ApiError(400) naming
// the bad field.
#include <optional>

#include "plumb/server/json_fields.h"
#include "plumb/tokenizer/chat.h"

namespace plumb::server {

struct ChatPlan {
  Conversation conversation;
  bool tools = false;  // tools offered (and tool_choice is not "none"): parse tool calls back
  // response_format json_object (an empty schema: any object) or json_schema (its "schema").
  std::optional<Json> json_schema;
};

ChatPlan parse_chat_request(const Json& body);

}  // namespace plumb::server
