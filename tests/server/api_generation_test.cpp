// Responses of /v1/chat/completions and /v1/completions against the scripted engine: the
// non-streamed shape, SSE framing, reasoning, tool calls, usage, parameters reaching the engine.
#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace plumb::test {
namespace {

using nlohmann::json;

std::string chat_body(const std::string& extra = "") {
  return R"({"model": "tiny-kjv", "messages": [{"role": "user", "content": "In the beginning"}])" + extra + "}";
}

std::vector<json> stream_chunks(const HttpResponse& r) {
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
  std::vector<std::string> payloads = sse_payloads(r.body);
  EXPECT_FALSE(payloads.empty());
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::vector<json> chunks;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) chunks.push_back(json::parse(payloads[i]));
  return chunks;
}

TEST_F(ServerTest, ChatNonStreamed) {
  engine_.script = [](const runtime::Request&) { return Script{{"And", " God", " said"}}; };
  HttpResponse r = post("/v1/chat/completions", chat_body());
  ASSERT_EQ(r.status, 200) << r.body;
  json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny-kjv");
  EXPECT_TRUE(body["system_fingerprint"].is_string());
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], "And God said");
  EXPECT_FALSE(choice["message"].contains("reasoning_content"));  // chat mode
  EXPECT_EQ(choice["finish_reason"], "stop");
  // The prompt the engine got is the V4 encoding of the conversation.
  auto sent = engine_.received();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(tiny_kjv_tokenizer().decode(sent[0].prompt),
            "<｜begin▁of▁sentence｜><｜User｜>In the beginning<｜Assistant｜></think>");
  EXPECT_EQ(body["usage"]["prompt_tokens"], sent[0].prompt.size());
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["usage"]["total_tokens"], sent[0].prompt.size() + 3);
}

TEST_F(ServerTest, ChatStreamedFramingAndUsage) {
  engine_.script = [](const runtime::Request&) { return Script{{"And", " God", " said", ", Let"}}; };
  auto chunks = stream_chunks(post("/v1/chat/completions", chat_body(R"(, "stream": true, "stream_options": {"include_usage": true})")));
  ASSERT_GE(chunks.size(), 3u);
  std::string content;
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  for (std::size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    content += c["choices"][0]["delta"].value("content", "");
    bool last_choice_chunk = i + 2 == chunks.size();
    EXPECT_EQ(c["choices"][0]["finish_reason"].is_null(), !last_choice_chunk) << c.dump();
  }
  EXPECT_EQ(content, "And God said, Let");
  const json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 4);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, ThinkingSplitsReasoningAndCountsItsTokens) {
  engine_.script = [](const runtime::Request&) { return Script{{"Let", " me", " think", "</think>", "Light", "<｜end▁of▁sentence｜>"}}; };
  std::string thinking = R"(, "chat_template_kwargs": {"thinking": true})";
  json body = json::parse(post("/v1/chat/completions", chat_body(thinking)).body);
  const json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Let me think");
  EXPECT_EQ(message["content"], "Light");  // no EOS text
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_TRUE(tiny_kjv_tokenizer().decode(engine_.received()[0].prompt).ends_with("<｜Assistant｜><think>"));

  auto chunks = stream_chunks(post("/v1/chat/completions", chat_body(thinking + R"(, "stream": true)")));
  std::string reasoning, content;
  for (const json& c : chunks) {
    reasoning += c["choices"][0]["delta"].value("reasoning_content", "");
    content += c["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(reasoning, "Let me think");
  EXPECT_EQ(content, "Light");
}

TEST_F(ServerTest, NoThinkEndMeansTheTextIsTheAnswer) {
  engine_.script = [](const runtime::Request&) { return Script{{"Light", " is", " good"}}; };
  json body = json::parse(post("/v1/chat/completions", chat_body(R"(, "reasoning_effort": "high")")).body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Light is good");
  EXPECT_TRUE(body["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_EQ(body["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
}

const std::string kTools = R"(, "tools": [{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

TEST_F(ServerTest, ToolCallsAreParsedBackIntoOpenAiToolCalls) {
  engine_.script = [](const runtime::Request&) {
    return Script{{"Let me look.", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n",
                   "<｜DSML｜parameter name=\"city\" string=\"true\">Jeru", "salem</｜DSML｜parameter>\n",
                   "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                   "<｜end▁of▁sentence｜>"}};
  };
  json body = json::parse(post("/v1/chat/completions", chat_body(kTools)).body);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me look.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json::parse(R"({"city": "Jerusalem", "days": 3})"));
  // The tools are in the system prompt the engine got.
  std::string prompt = tiny_kjv_tokenizer().decode(engine_.received()[0].prompt);
  EXPECT_NE(prompt.find("## Tools"), std::string::npos);
  EXPECT_NE(prompt.find(R"({"name": "get_weather", "description": "Weather of a city")"), std::string::npos);

  auto chunks = stream_chunks(post("/v1/chat/completions", chat_body(kTools + R"(, "stream": true)")));
  std::string content;
  json calls;
  for (const json& c : chunks) {
    content += c["choices"][0]["delta"].value("content", "");
    if (c["choices"][0]["delta"].contains("tool_calls")) calls = c["choices"][0]["delta"]["tool_calls"];
  }
  EXPECT_EQ(content, "Let me look.");  // the DSML block is not streamed as text
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ServerTest, MalformedToolCallsAreReturnedAsContentNotDropped) {
  engine_.script = [](const runtime::Request&) {
    return Script{{"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\">x"}};
  };
  json body = json::parse(post("/v1/chat/completions", chat_body(kTools)).body);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_NE(choice["message"]["content"].get<std::string>().find("get_weather"), std::string::npos);
}

TEST_F(ServerTest, ParametersReachTheEngine) {
  std::string extra = R"(, "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 42, "stop": ["Amen", "\n\n"],
    "ignore_eos": true, "priority": 3, "logprobs": true, "top_logprobs": 2, "n": 2)";
  HttpResponse r = post("/v1/chat/completions", chat_body(extra));
  ASSERT_EQ(r.status, 200) << r.body;
  auto sent = engine_.received();
  ASSERT_EQ(sent.size(), 2u);  // n = 2: two submissions
  const runtime::Request& q = sent[0];
  EXPECT_EQ(q.max_tokens, 7);
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.5f);
  EXPECT_FALSE(q.sampling.greedy);
  EXPECT_FLOAT_EQ(q.sampling.top_p, 0.9f);
  EXPECT_EQ(q.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(q.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(q.sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(q.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(q.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(q.sampling.seed, 42u);
  EXPECT_EQ(sent[1].sampling.seed, 43u);
  EXPECT_EQ(q.stop_strings, (std::vector<std::string>{"Amen", "\n\n"}));
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.priority, 3);
  EXPECT_EQ(q.top_logprobs, 2);
  json body = json::parse(r.body);
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  const json& lp = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_FLOAT_EQ(lp[0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp[0]["token"], tiny_kjv_tokenizer().token_bytes(100));
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);  // both choices
  // temperature 0 is greedy; max_completion_tokens wins over max_tokens.
  post("/v1/chat/completions", chat_body(R"(, "temperature": 0, "max_tokens": 9, "max_completion_tokens": 5)"));
  EXPECT_TRUE(engine_.received()[2].sampling.greedy);
  EXPECT_EQ(engine_.received()[2].max_tokens, 5);
}

TEST_F(ServerTest, CompletionsWithEchoAndLogprobs) {
  engine_.script = [](const runtime::Request&) { return Script{{" light", "."}}; };
  HttpResponse r = post("/v1/completions", R"({"prompt": "Let there be", "logprobs": 1, "echo": true, "max_tokens": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Let there be light.");
  auto sent = engine_.received();
  EXPECT_TRUE(sent[0].prompt_logprobs);
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), sent[0].prompt.size() + 2);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"].back().size(), 1u);

  // A token-id prompt, streamed.
  auto chunks = stream_chunks(post("/v1/completions", R"({"prompt": [10, 11, 12], "stream": true})"));
  std::string text;
  for (const json& c : chunks) text += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, " light.");
  EXPECT_EQ(engine_.received()[1].prompt, (std::vector<runtime::TokenId>{10, 11, 12}));
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, LengthFinishAndEngineErrors) {
  engine_.script = [](const runtime::Request&) { return Script{{"a", "b"}, runtime::FinishReason::kLength}; };
  EXPECT_EQ(json::parse(post("/v1/chat/completions", chat_body()).body)["choices"][0]["finish_reason"], "length");
  engine_.script = [](const runtime::Request&) { return Script{{"a"}, runtime::FinishReason::kError}; };
  HttpResponse r = post("/v1/chat/completions", chat_body());
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");
  auto payloads = sse_payloads(post("/v1/chat/completions", chat_body(R"(, "stream": true)")).body);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_TRUE(json::parse(payloads[payloads.size() - 2]).contains("error"));
  EXPECT_EQ(payloads.back(), "[DONE]");
}

TEST_F(ServerTest, TokenizeDetokenizeAndModels) {
  json t = json::parse(post("/tokenize", R"({"prompt": "In the beginning God"})").body);
  std::vector<std::uint32_t> ids = t["tokens"];
  EXPECT_EQ(ids, tiny_kjv_tokenizer().encode("In the beginning God"));
  EXPECT_EQ(t["count"], ids.size());
  json d = json::parse(post("/detokenize", json{{"tokens", ids}}.dump()).body);
  EXPECT_EQ(d["prompt"], "In the beginning God");
  EXPECT_EQ(post("/detokenize", R"({"tokens": [99999999]})").status, 400);
  json chat = json::parse(post("/tokenize", R"({"messages": [{"role": "user", "content": "x"}]})").body);
  EXPECT_EQ(chat["tokens"][0], *tiny_kjv_tokenizer().bos_id());
  json models = json::parse(get("/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["max_model_len"], 4096);
}

TEST_F(ServerTest, MetricsHaveTheStableNames) {
  post("/v1/chat/completions", chat_body());
  HttpResponse m = get("/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name : {"plumb_requests_running ", "plumb_requests_waiting ", "plumb_kv_blocks_used ", "plumb_kv_blocks_total 64",
                           "plumb_prompt_tokens_total ", "plumb_generation_tokens_total ", "plumb_request_success_total{finish_reason=\"stop\"}",
                           "plumb_preemptions_total ", "plumb_prefix_cache_queries_total ", "plumb_prefix_cache_hits_total ",
                           "plumb_time_to_first_token_seconds_count 1", "plumb_inter_token_latency_seconds_count 2",
                           "plumb_e2e_request_latency_seconds_count 1", "plumb_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1"})
    EXPECT_NE(m.body.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace plumb::test

namespace plumb::test {
namespace {

TEST_F(ServerTest, ResponseFormatIsRenderedAndEnforced) {
  std::string format = R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema":
    {"type": "object", "properties": {"verse": {"type": "string"}}, "required": ["verse"]}}})";
  ASSERT_EQ(post("/v1/chat/completions", chat_body(format)).status, 200);
  auto sent = engine_.received();
  ASSERT_TRUE(sent[0].constraint);
  std::string prompt = tiny_kjv_tokenizer().decode(sent[0].prompt);
  EXPECT_NE(prompt.find("## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{\"type\": \"json_schema\""),
            std::string::npos)
      << prompt;
  // The constraint the engine got allows "{" first and no letter.
  std::unique_ptr<bool[]> allowed(new bool[6144]);
  std::fill_n(allowed.get(), 6144, true);
  sent[0].constraint->mask({allowed.get(), 6144}, 256);
  EXPECT_TRUE(allowed[*tiny_kjv_tokenizer().token_to_id("{")]);
  EXPECT_FALSE(allowed[*tiny_kjv_tokenizer().token_to_id("a")]);
  HttpResponse bad = post("/v1/chat/completions", chat_body(R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"anyOf": []}}})"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad.body)["error"]["param"], "response_format");
}

}  // namespace
}  // namespace plumb::test
