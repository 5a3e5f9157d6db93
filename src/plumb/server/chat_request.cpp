#include "plumb/server/chat_request.h"

#include <fmt/format.h>

#include "plumb/server/api_error.h"

namespace plumb::server {
namespace {

using Role = ChatMessage::Role;

Role parse_role(const std::string& role, const std::string& where) {
  if (role == "system") return Role::kSystem;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool") return Role::kTool;
  if (role == "developer") return Role::kDeveloper;
  bad_field(where, fmt::format("has unknown role '{}' (expected system, user, assistant, tool or developer)", role));
}

// A string, null, or an array of {"type": "text", "text": ...} parts.
std::string parse_content(const Json& message, const std::string& where) {
  const Json* content = field(message, "content");
  if (!content) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) bad_field(where + ".content", "must be a string or an array of text parts");
  std::string text;
  for (const Json& part : *content) {
    // Compared as JSON: value("type", "") would throw a type_error (a 500) for "type": 7.
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") || !part["text"].is_string())
      bad_field(where + ".content", "parts must be {\"type\": \"text\", \"text\": ...} (only text is supported)");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ToolCall> parse_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) bad_field(where, "must be an array");
  std::vector<ToolCall> out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string at = fmt::format("{}[{}]", where, i);
    const Json& call = calls[i];
    const Json* function = call.is_object() ? field(call, "function") : nullptr;
    if (!function || !function->is_object()) bad_field(at, "must have a \"function\" object");
    ToolCall tc;
    tc.id = get_string(call, "id").value_or("");
    auto name = get_string(*function, "name");
    if (!name || name->empty()) bad_field(at + ".function.name", "is required");
    tc.name = *name;
    const Json* args = field(*function, "arguments");
    tc.arguments = !args ? "{}" : args->is_string() ? args->get<std::string>() : args->dump();
    out.push_back(std::move(tc));
  }
  return out;
}

ChatMessage parse_message(const Json& m, std::size_t index) {
  std::string where = fmt::format("messages[{}]", index);
  if (!m.is_object()) bad_field(where, "must be an object");
  auto role = get_string(m, "role");
  if (!role) bad_field(where + ".role", "is required");
  ChatMessage message{parse_role(*role, where + ".role"), parse_content(m, where)};
  if (message.role == Role::kAssistant) {
    // DeepSeek and SGLang call it reasoning_content, vLLM reasoning: accept either.
    message.reasoning = get_string(m, "reasoning_content").value_or(get_string(m, "reasoning").value_or(""));
    if (const Json* calls = field(m, "tool_calls")) message.tool_calls = parse_tool_calls(*calls, where + ".tool_calls");
  }
  if (message.role == Role::kTool) message.tool_call_id = get_string(m, "tool_call_id").value_or("");
  if (message.role == Role::kDeveloper && message.content.empty()) bad_field(where + ".content", "is required for a developer message");
  return message;
}

std::vector<Json> parse_tools(const Json& body) {
  const Json* tools = field(body, "tools");
  if (!tools) return {};
  if (!tools->is_array()) bad_field("tools", "must be an array");
  std::vector<Json> functions;
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    std::string at = fmt::format("tools[{}]", i);
    if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function") bad_field(at, "must be {\"type\": \"function\", \"function\": {...}}");
    const Json* function = field(tool, "function");
    if (!function || !function->is_object() || !get_string(*function, "name")) bad_field(at + ".function", "must be an object with a name");
    functions.push_back(*function);
  }
  return functions;
}

// The schema response_format asks for, if any; `rendered` receives what goes into the prompt.
std::optional<Json> parse_response_format(const Json& body, std::optional<Json>& rendered) {
  const Json* format = field(body, "response_format");
  if (!format) return std::nullopt;
  if (!format->is_object()) bad_field("response_format", "must be an object");
  std::string type = get_string(*format, "type").value_or("");
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    rendered = *format;
    return Json{{"type", "object"}};
  }
  if (type == "json_schema") {
    const Json* spec = field(*format, "json_schema");
    const Json* schema = spec && spec->is_object() ? field(*spec, "schema") : nullptr;
    if (!schema || !schema->is_object()) bad_field("response_format.json_schema.schema", "is required and must be an object");
    rendered = *format;
    return *schema;
  }
  bad_field("response_format.type", "must be text, json_object or json_schema");
}

}  // namespace

ChatPlan parse_chat_request(const Json& body) {
  const Json* messages = field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty()) bad_field("messages", "must be a non-empty array");
  ChatPlan plan;
  Conversation& c = plan.conversation;
  for (std::size_t i = 0; i < messages->size(); ++i) c.messages.push_back(parse_message((*messages)[i], i));
  Role last = c.messages.back().role;
  if (last != Role::kUser && last != Role::kTool && last != Role::kDeveloper)
    bad_field("messages", "must end with a user, tool or developer message");

  bool thinking = false;
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad_field("chat_template_kwargs", "must be an object");
    thinking = get_bool(*kwargs, "thinking").value_or(get_bool(*kwargs, "enable_thinking").value_or(false));
  }
  if (auto effort = get_string(body, "reasoning_effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "max")
      bad_field("reasoning_effort", "must be low, medium, high or max");
    c.effort = *effort == "max" ? ReasoningEffort::kMax : ReasoningEffort::kHigh;
    thinking = true;  // asking for an effort asks for reasoning (unless thinking is set false)
    if (const Json* kwargs = field(body, "chat_template_kwargs"); kwargs && get_bool(*kwargs, "thinking") == false) thinking = false;
  }
  c.mode = thinking ? ChatMode::kThinking : ChatMode::kChat;

  std::vector<Json> tools = parse_tools(body);
  std::string tool_choice = "auto";
  if (const Json* choice = field(body, "tool_choice")) tool_choice = choice->is_string() ? choice->get<std::string>() : "function";
  if (tool_choice == "none") tools.clear();
  std::optional<Json> rendered_format;
  plan.json_schema = parse_response_format(body, rendered_format);
  plan.tools = !tools.empty();
  if (plan.tools || rendered_format) {
    // The encoding carries tools and the response format in a system message: the first one, or
    // a new empty one in front.
    if (c.messages.front().role != Role::kSystem) c.messages.insert(c.messages.begin(), ChatMessage{Role::kSystem, ""});
    c.messages.front().tools = std::move(tools);
    c.messages.front().response_format = std::move(rendered_format);
  }
  return plan;
}

}  // namespace plumb::server
