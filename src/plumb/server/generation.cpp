#include "plumb/server/generation.h"

#include <fmt/format.h>

#include "plumb/server/api_error.h"

namespace plumb::server {
namespace {

using Json = nlohmann::ordered_json;
using runtime::FinishReason;

Json bytes_of(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string wire_json(const Json& json) { return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

Generation::Generation(ResponseMeta meta, GenerationParams params, std::shared_ptr<Exchange> exchange, const Tokenizer& tokenizer,
                       ServerMetrics& metrics, Clock::time_point arrival)
    : meta_(std::move(meta)), params_(std::move(params)), exchange_(std::move(exchange)), tokenizer_(tokenizer),
      metrics_(metrics), arrival_(arrival) {
  for (int i = 0; i < params_.n; ++i) choices_.emplace_back(meta_.mode, meta_.tools);
  if (params_.stream) exchange_->start_events();
}

void Generation::record_timing(Choice& c, const runtime::Event& e, Clock::time_point at) {
  if (e.tokens.empty()) return;
  if (!c.last_token) metrics_.time_to_first_token.observe(seconds(at - arrival_));
  else metrics_.inter_token_latency.observe(seconds(at - *c.last_token) / static_cast<double>(e.tokens.size()));
  c.last_token = at;
}

void Generation::add_logprobs(Choice& c, const runtime::Event& e, Json* chunk_logprobs) {
  if (!params_.logprobs) return;
  for (std::size_t i = 0; i < e.logprobs.size(); ++i) {
    const std::string& token = tokenizer_.token_bytes(e.logprobs[i].token);
    Json alternatives = Json::array();
    if (i < e.top_logprobs.size()) {
      for (const auto& alt : e.top_logprobs[i]) {
        const std::string& t = tokenizer_.token_bytes(alt.token);
        if (meta_.endpoint == Endpoint::kChat) alternatives.push_back({{"token", t}, {"logprob", alt.logprob}, {"bytes", bytes_of(t)}});
        else alternatives.push_back({{t, alt.logprob}});
      }
    }
    if (meta_.endpoint == Endpoint::kChat) {
      Json entry = {{"token", token}, {"logprob", e.logprobs[i].logprob}, {"bytes", bytes_of(token)}, {"top_logprobs", alternatives}};
      c.logprobs.push_back(entry);
      if (chunk_logprobs) chunk_logprobs->push_back(entry);
    } else {
      Json& lp = c.completion_logprobs;
      std::size_t offset = meta_.echo_text.size() + c.text.size();  // approximate: text of earlier events
      lp["tokens"].push_back(token);
      lp["token_logprobs"].push_back(e.logprobs[i].logprob);
      Json merged = Json::object();
      for (const auto& a : alternatives) merged.update(a);
      lp["top_logprobs"].push_back(merged);
      lp["text_offset"].push_back(offset);
    }
  }
}

void Generation::on_event(int index, const runtime::Event& e, Clock::time_point at) {
  if (done_) return;
  Choice& c = choices_[index];
  if (!c.started && meta_.endpoint == Endpoint::kCompletions && params_.echo) {
    c.text = meta_.echo_text;
    if (params_.logprobs) {
      Json& lp = c.completion_logprobs;
      std::size_t offset = 0;
      for (std::size_t i = 0; i < meta_.prompt.size(); ++i) {
        const std::string& token = tokenizer_.token_bytes(meta_.prompt[i]);
        lp["tokens"].push_back(token);
        lp["token_logprobs"].push_back(i == 0 || i - 1 >= e.prompt_logprobs.size() ? Json(nullptr) : Json(e.prompt_logprobs[i - 1]));
        lp["top_logprobs"].push_back(nullptr);
        lp["text_offset"].push_back(offset);
        offset += token.size();
      }
    }
  }
  record_timing(c, e, at);
  if (params_.stream) stream_event(index, c, e);
  else {
    if (meta_.endpoint == Endpoint::kChat) c.parser.push(e.text);
    add_logprobs(c, e, nullptr);
    c.text += e.text;
  }
  // Tokens read while the parser is still inside the reasoning ("</think>" itself is not one).
  if (c.parser.in_reasoning()) c.reasoning_tokens += static_cast<std::int64_t>(e.tokens.size());
  c.started = true;
  if (!e.final) return;

  c.finished = true;
  c.finish = e.finish;
  c.error = e.error;
  c.completion_tokens = e.completion_tokens;
  if (index == 0) prompt_tokens_ = e.prompt_tokens, cached_tokens_ = e.cached_prompt_tokens;
  CompletionParser::Delta last;
  if (meta_.endpoint == Endpoint::kChat) {
    bool ended_by_model = e.finish == FinishReason::kStop;
    c.parsed = c.parser.finish(ended_by_model, last);
    if (c.parsed.answer_was_reasoning) c.reasoning_tokens = 0;
  }
  if (params_.stream && e.finish != FinishReason::kError && !(e.finish == FinishReason::kCancelled && shutdown_))
    stream_final(index, c, last);
  if (++finished_ == params_.n) {
    metrics_.e2e_request_latency.observe(seconds(at - arrival_));
    finish_all();
  }
}

void Generation::stream_event(int index, Choice& c, const runtime::Event& e) {
  Json logprobs = Json::array();
  Json choice = {{"index", index}};
  if (meta_.endpoint == Endpoint::kChat) {
    CompletionParser::Delta d = c.parser.push(e.text);
    add_logprobs(c, e, &logprobs);
    Json delta = Json::object();
    if (!c.started) delta["role"] = "assistant";
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty() || !c.started) delta["content"] = d.content;
    if (delta.size() == 0 && logprobs.empty()) return;
    choice["delta"] = delta;
    choice["logprobs"] = params_.logprobs ? Json{{"content", logprobs}} : Json(nullptr);
  } else {
    std::size_t before = c.completion_logprobs.is_null() ? 0 : c.completion_logprobs["tokens"].size();
    add_logprobs(c, e, nullptr);
    c.text += e.text;
    if (e.text.empty() && !params_.logprobs) return;
    choice["text"] = e.text;
    if (params_.logprobs) {
      Json lp;
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        Json part = Json::array();
        const Json& all = c.completion_logprobs[key];
        for (std::size_t i = before; i < all.size(); ++i) part.push_back(all[i]);
        lp[key] = part;
      }
      choice["logprobs"] = lp;
    } else {
      choice["logprobs"] = nullptr;
    }
  }
  choice["finish_reason"] = nullptr;
  send(chunk(Json::array({choice})));
}

void Generation::stream_final(int index, Choice& c, const CompletionParser::Delta& last) {
  Json delta = Json::object();
  if (meta_.endpoint == Endpoint::kChat) {
    if (!c.started) delta["role"] = "assistant";
    if (!last.reasoning.empty()) delta["reasoning_content"] = last.reasoning;
    // The answer that arrived as reasoning deltas is sent again as the content it turned out to be.
    std::string content = c.parsed.answer_was_reasoning ? c.parsed.content : last.content;
    if (!content.empty()) delta["content"] = content;
    if (!c.parsed.tool_calls.empty()) {
      Json calls = Json::array();
      for (std::size_t i = 0; i < c.parsed.tool_calls.size(); ++i) {
        const ToolCall& t = c.parsed.tool_calls[i];
        calls.push_back({{"index", i},
                         {"id", fmt::format("call_{}_{}_{}", meta_.id, index, i)},
                         {"type", "function"},
                         {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      }
      delta["tool_calls"] = calls;
    }
  }
  Json choice = {{"index", index}};
  if (meta_.endpoint == Endpoint::kChat) choice["delta"] = delta;
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason(c);
  send(chunk(Json::array({choice})));
}

std::string Generation::finish_reason(const Choice& c) const {
  switch (c.finish) {
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
    default: return c.parsed.tool_calls.empty() ? "stop" : "tool_calls";
  }
}

Json Generation::chunk(Json choices) const {
  Json out = {{"id", meta_.id},
              {"object", meta_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"system_fingerprint", meta_.system_fingerprint},
              {"choices", std::move(choices)}};
  if (params_.include_usage) out["usage"] = nullptr;
  return out;
}

Json Generation::usage() const {
  std::int64_t completion = 0, reasoning = 0;
  for (const Choice& c : choices_) completion += c.completion_tokens, reasoning += c.reasoning_tokens;
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion},
          {"total_tokens", prompt_tokens_ + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}},
          {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
}

Json Generation::whole_response() const {
  Json choices = Json::array();
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    if (meta_.endpoint == Endpoint::kChat) {
      const ParsedCompletion& p = c.parsed;
      Json message = {{"role", "assistant"}, {"content", p.content.empty() && !p.tool_calls.empty() ? Json(nullptr) : Json(p.content)}};
      if (meta_.mode == ChatMode::kThinking) message["reasoning_content"] = p.reasoning.empty() ? Json(nullptr) : Json(p.reasoning);
      if (!p.tool_calls.empty()) {
        Json calls = Json::array();
        for (std::size_t k = 0; k < p.tool_calls.size(); ++k)
          calls.push_back({{"id", fmt::format("call_{}_{}_{}", meta_.id, i, k)},
                           {"type", "function"},
                           {"function", {{"name", p.tool_calls[k].name}, {"arguments", p.tool_calls[k].arguments}}}});
        message["tool_calls"] = calls;
      }
      choice["message"] = message;
      choice["logprobs"] = params_.logprobs ? Json{{"content", c.logprobs}} : Json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = params_.logprobs ? c.completion_logprobs : Json(nullptr);
    }
    choice["finish_reason"] = finish_reason(c);
    choices.push_back(choice);
  }
  return {{"id", meta_.id},
          {"object", meta_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", meta_.created},
          {"model", meta_.model},
          {"system_fingerprint", meta_.system_fingerprint},
          {"choices", choices},
          {"usage", usage()}};
}

void Generation::send(const Json& json) { exchange_->send_event("data: " + wire_json(json) + "\n\n"); }

void Generation::finish_all() {
  done_ = true;
  // A failed choice fails the response: the engine's error, or the shutdown that cut it short.
  std::string error;
  int status = 500;
  for (const Choice& c : choices_) {
    if (c.finish == FinishReason::kError) error = "generation failed: " + c.error;
    if (c.finish == FinishReason::kCancelled && shutdown_) error = "the server is shutting down", status = 503;
  }
  if (params_.stream) {
    if (!error.empty()) exchange_->send_event("data: " + error_body(status, error) + "\n\n");
    else if (params_.include_usage) {
      Json last = chunk(Json::array());
      last["usage"] = usage();
      send(last);
    }
    exchange_->send_event("data: [DONE]\n\n");
    exchange_->end_events();
    return;
  }
  if (!error.empty()) return exchange_->respond(status, "application/json", error_body(status, error));
  exchange_->respond(200, "application/json", wire_json(whole_response()));
}

}  // namespace plumb::server
