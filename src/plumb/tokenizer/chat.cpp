#include "plumb/tokenizer/chat.h"

#include <algorithm>
#include <map>

#include "plumb/tokenizer/chat_tokens.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using Role = ChatMessage::Role;
using namespace chat_tokens;

// The release's fixed texts (encoding_dsv4: REASONING_EFFORT_MAX, TOOLS_TEMPLATE,
// response_format_template); the model was trained on them, so they are reproduced exactly.
constexpr std::string_view kEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr std::string_view kResponseFormatIntro =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

std::string tools_block(const std::vector<nlohmann::ordered_json>& tools) {
  std::string schemas;
  for (const auto& tool : tools) {
    if (!schemas.empty()) schemas += '\n';
    schemas += python_json(tool);
  }
  const std::string d(kDsml);
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<" + d + "tool_calls>\" block like the following:\n\n"
         "<" + d + "tool_calls>\n"
         "<" + d + "invoke name=\"$TOOL_NAME\">\n"
         "<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + "parameter>\n"
         "...\n"
         "</" + d + "invoke>\n"
         "<" + d + "invoke name=\"$TOOL_NAME2\">\n"
         "...\n"
         "</" + d + "invoke>\n"
         "</" + d + "tool_calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
         "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n" + schemas + "\n\n"
         "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

// Tools and response format of a system or developer message.
std::string extras_of(const ChatMessage& m) {
  std::string out;
  if (!m.tools.empty()) out += "\n\n" + tools_block(m.tools);
  if (m.response_format) out += "\n\n" + std::string(kResponseFormatIntro) + python_json(*m.response_format);
  return out;
}

std::string dsml_parameters(const ToolCall& call) {
  nlohmann::ordered_json args;
  try {
    args = call.arguments.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(call.arguments);
  } catch (const nlohmann::json::exception&) {
    args = {{"arguments", call.arguments}};  // the release keeps unparsable arguments as one string
  }
  if (!args.is_object()) args = {{"arguments", args}};
  std::string out;
  for (const auto& [key, value] : args.items()) {
    if (!out.empty()) out += '\n';
    bool is_string = value.is_string();
    out += fmt::format("<{}parameter name=\"{}\" string=\"{}\">{}</{}parameter>", kDsml, key, is_string ? "true" : "false",
                       is_string ? value.get<std::string>() : python_json(value), kDsml);
  }
  return out;
}

std::string tool_calls_block(const std::vector<ToolCall>& calls) {
  std::string invokes;
  for (const ToolCall& call : calls) {
    if (!invokes.empty()) invokes += '\n';
    invokes += fmt::format("<{}invoke name=\"{}\">\n{}\n</{}invoke>", kDsml, call.name, dsml_parameters(call), kDsml);
  }
  return fmt::format("\n\n<{}tool_calls>\n{}\n</{}tool_calls>", kDsml, invokes, kDsml);
}

// One user turn after merging: text and tool results in order.
struct Block {
  bool tool_result = false;
  std::string text, tool_call_id;
};

struct Turn {
  const ChatMessage* message = nullptr;  // null for a merged user turn
  Role role;
  std::vector<Block> blocks;  // user turns
};

// Tool messages and consecutive user messages become one user turn (the release's
// merge_tool_messages); tool results are ordered like the preceding assistant turn's calls.
std::vector<Turn> merge_turns(const std::vector<ChatMessage>& messages) {
  std::vector<Turn> turns;
  std::map<std::string, std::size_t> call_order;
  for (const ChatMessage& m : messages) {
    if (m.role == Role::kTool || m.role == Role::kUser) {
      Block block{m.role == Role::kTool, m.content, m.tool_call_id};
      if (turns.empty() || turns.back().role != Role::kUser) turns.push_back({nullptr, Role::kUser, {}});
      turns.back().blocks.push_back(std::move(block));
      continue;
    }
    if (m.role == Role::kAssistant && !m.tool_calls.empty()) {
      call_order.clear();
      for (std::size_t i = 0; i < m.tool_calls.size(); ++i)
        if (!m.tool_calls[i].id.empty()) call_order[m.tool_calls[i].id] = i;
    }
    turns.push_back({&m, m.role, {}});
  }
  // Sort tool results within each user turn by call order, leaving text blocks in place.
  for (Turn& t : turns) {
    if (t.role != Role::kUser) continue;
    std::vector<Block> results;
    for (const Block& b : t.blocks)
      if (b.tool_result) results.push_back(b);
    auto rank = [&](const Block& b) {
      auto it = call_order.find(b.tool_call_id);
      return it == call_order.end() ? std::size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
    std::size_t next = 0;
    for (Block& b : t.blocks)
      if (b.tool_result) b = results[next++];
  }
  return turns;
}

std::string user_text(const Turn& t) {
  std::string out;
  for (std::size_t i = 0; i < t.blocks.size(); ++i) {
    if (i > 0) out += "\n\n";
    const Block& b = t.blocks[i];
    out += b.tool_result ? "<tool_result>" + b.text + "</tool_result>" : b.text;
  }
  return out;
}

std::ptrdiff_t last_user_index(const std::vector<Turn>& turns) {
  for (std::ptrdiff_t i = std::ssize(turns) - 1; i >= 0; --i)
    if (turns[i].role == Role::kUser || turns[i].role == Role::kDeveloper) return i;
  return -1;
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value) {
  if (value.is_object()) {
    std::string out = "{";
    for (const auto& [key, item] : value.items()) {
      if (out.size() > 1) out += ", ";
      out += nlohmann::ordered_json(key).dump() + ": " + python_json(item);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (const auto& item : value) {
      if (out.size() > 1) out += ", ";
      out += python_json(item);
    }
    return out + "]";
  }
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_conversation(const Conversation& conversation) {
  std::vector<Turn> turns = merge_turns(conversation.messages);
  const bool thinking = conversation.mode == ChatMode::kThinking;
  // With tools nothing is dropped: every turn keeps its reasoning.
  const bool drop = std::none_of(conversation.messages.begin(), conversation.messages.end(),
                                 [](const ChatMessage& m) { return !m.tools.empty(); });
  if (thinking && drop) {
    std::ptrdiff_t last = last_user_index(turns);
    std::vector<Turn> kept;
    for (std::ptrdiff_t i = 0; i < std::ssize(turns); ++i)
      if (turns[i].role != Role::kDeveloper || i >= last) kept.push_back(turns[i]);
    turns = std::move(kept);
  }
  const std::ptrdiff_t last_user = last_user_index(turns);

  std::string out(kBos);
  if (thinking && conversation.effort == ReasoningEffort::kMax) out += kEffortMax;
  for (std::ptrdiff_t i = 0; i < std::ssize(turns); ++i) {
    const Turn& t = turns[i];
    const ChatMessage* m = t.message;
    switch (t.role) {
      case Role::kSystem:
        out += m->content + extras_of(*m);
        break;
      case Role::kDeveloper:
        if (m->content.empty()) fail("message {}: a developer message needs content", i + 1);
        out.append(kUser).append(m->content).append(extras_of(*m));
        break;
      case Role::kUser:
        out.append(kUser).append(user_text(t));
        break;
      case Role::kLatestReminder:
        out.append(kLatestReminder).append(m->content);
        break;
      case Role::kAssistant:
        // Reasoning is sent back only for turns after the last user message (or always, with tools).
        if (thinking && (!drop || i > last_user)) out.append(m->reasoning).append(kThinkEnd);
        out += m->content;
        if (!m->tool_calls.empty()) out += tool_calls_block(m->tool_calls);
        if (!m->unfinished) out += kEos;
        break;
      case Role::kTool:
        break;  // merged into user turns above
    }
    bool next_opens_turn = i + 1 < std::ssize(turns) && turns[i + 1].role != Role::kAssistant &&
                           turns[i + 1].role != Role::kLatestReminder;
    if (next_opens_turn || (t.role != Role::kUser && t.role != Role::kDeveloper)) continue;
    out.append(kAssistant).append(thinking && (!drop || i >= last_user) ? kThinkStart : kThinkEnd);
  }
  return out;
}

std::string render_chat_prompt(std::span<const ChatMessage> messages, ChatMode mode) {
  if (messages.empty() || messages.back().role != Role::kUser) fail("a chat prompt must end with a user message");
  bool conversation_started = false;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != Role::kSystem) conversation_started = true;
    else if (conversation_started) fail("message {}: system messages may only come before the conversation", i + 1);
  }
  return render_conversation({{messages.begin(), messages.end()}, mode, ReasoningEffort::kHigh});
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
