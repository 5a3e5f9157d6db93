// The full DeepSeek-V4 conversation encoding (roles, tools, tool results, response format,
// reasoning effort) against prompts written out by hand from the release's encoder format.
#include <gtest/gtest.h>

#include "plumb/tokenizer/chat.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using Role = ChatMessage::Role;
using Json = nlohmann::ordered_json;

const std::string B = "<｜begin▁of▁sentence｜>", E = "<｜end▁of▁sentence｜>", U = "<｜User｜>", A = "<｜Assistant｜>";

ChatMessage msg(Role role, std::string content) { return ChatMessage{role, std::move(content)}; }

TEST(ChatConversation, ThinkingDropsEarlierReasoningAndDeveloperMessages) {
  ChatMessage first_answer = msg(Role::kAssistant, "a1");
  first_answer.reasoning = "r1";
  ChatMessage last_answer = msg(Role::kAssistant, "partial");
  Conversation c{{msg(Role::kSystem, "S"), msg(Role::kDeveloper, "D"), msg(Role::kUser, "q1"), first_answer, msg(Role::kUser, "q2")},
                 ChatMode::kThinking};
  EXPECT_EQ(render_conversation(c), B + "S" + U + "q1" + A + "</think>a1" + E + U + "q2" + A + "<think>");
  c.mode = ChatMode::kChat;  // chat mode keeps the developer turn
  EXPECT_EQ(render_conversation(c), B + "S" + U + "D" + U + "q1" + A + "</think>a1" + E + U + "q2" + A + "</think>");
}

TEST(ChatConversation, MaxEffortPrependsTheInstructionInThinkingModeOnly) {
  Conversation c{{msg(Role::kUser, "q")}, ChatMode::kThinking, ReasoningEffort::kMax};
  std::string p = render_conversation(c);
  EXPECT_TRUE(p.starts_with(B + "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough"));
  EXPECT_TRUE(p.ends_with("no assumption is left unchecked.\n\n" + U + "q" + A + "<think>"));
  c.effort = ReasoningEffort::kHigh;
  EXPECT_EQ(render_conversation(c), B + U + "q" + A + "<think>");
  c.mode = ChatMode::kChat, c.effort = ReasoningEffort::kMax;
  EXPECT_EQ(render_conversation(c), B + U + "q" + A + "</think>");
}

TEST(ChatConversation, ToolsToolCallsAndResultsInCallOrder) {
  ChatMessage system = msg(Role::kSystem, "S");
  system.tools = {Json::parse(R"({"name": "f", "description": "é", "parameters": {"type": "object", "properties": {}}})")};
  ChatMessage call = msg(Role::kAssistant, "");
  call.reasoning = "r";
  call.tool_calls = {{"id1", "f", R"({"city": "Paris", "n": 2, "tags": ["a","b"]})"}, {"id2", "g", "{}"}};
  ChatMessage result2 = msg(Role::kTool, "R2"), result1 = msg(Role::kTool, "R1");
  result2.tool_call_id = "id2", result1.tool_call_id = "id1";
  Conversation c{{system, msg(Role::kUser, "q"), call, result2, result1}, ChatMode::kThinking};
  std::string p = render_conversation(c);
  std::string tools_start = B + "S\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question.";
  EXPECT_TRUE(p.starts_with(tools_start)) << p;
  EXPECT_NE(p.find("### Available Tool Schemas\n\n{\"name\": \"f\", \"description\": \"é\", \"parameters\": {\"type\": \"object\", "
                   "\"properties\": {}}}\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
                   "calls.\n" + U + "q"),
            std::string::npos)
      << p;
  // With tools nothing is dropped: the reasoning stays, and the results turn opens <think>.
  std::string tail = U + "q" + A + "<think>r</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                     "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                     "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>\n"
                     "<｜DSML｜parameter name=\"tags\" string=\"false\">[\"a\", \"b\"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                     "<｜DSML｜invoke name=\"g\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + E +
                     U + "<tool_result>R1</tool_result>\n\n<tool_result>R2</tool_result>" + A + "<think>";
  EXPECT_TRUE(p.ends_with(tail)) << p;
}

TEST(ChatConversation, ResponseFormatAndDeveloperExtras) {
  ChatMessage system = msg(Role::kSystem, "");
  system.response_format = Json::parse(R"({"type": "json_object"})");
  EXPECT_EQ(render_conversation({{system, msg(Role::kUser, "q")}, ChatMode::kChat}),
            B + "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{\"type\": \"json_object\"}" + U +
                "q" + A + "</think>");
  EXPECT_THROW(render_conversation({{msg(Role::kDeveloper, ""), msg(Role::kUser, "q")}, ChatMode::kChat}), Error);
}

TEST(ChatConversation, ConsecutiveUserTurnsAndUserTextAfterToolResultsMerge) {
  ChatMessage result = msg(Role::kTool, "R");
  Conversation c{{msg(Role::kUser, "a"), msg(Role::kUser, "b"), result, msg(Role::kUser, "c")}, ChatMode::kChat};
  EXPECT_EQ(render_conversation(c), B + U + "a\n\nb\n\n<tool_result>R</tool_result>\n\nc" + A + "</think>");
}

TEST(ChatConversation, PythonJsonMatchesJsonDumps) {
  EXPECT_EQ(python_json(Json::parse(R"({"b": [1, 2.5, true, null], "a": {"x": "é\n\""}})")),
            R"({"b": [1, 2.5, true, null], "a": {"x": "é\n\""}})");
  EXPECT_EQ(python_json(Json::parse("[]")), "[]");
  EXPECT_EQ(python_json(Json::parse("{}")), "{}");
}

}  // namespace
}  // namespace plumb
