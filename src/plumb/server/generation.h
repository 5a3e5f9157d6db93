#pragma once
// One generating HTTP request (chat or completions, n choices): turns the engine's events into
// the OpenAI response, streamed as SSE chunks or sent whole at the end, and records the latency
// histograms. Lives on its exchange's executor: every method but the constructor runs there.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/server/generation_params.h"
#include "plumb/server/http_server.h"
#include "plumb/server/metrics.h"
#include "plumb/tokenizer/chat_output.h"

namespace plumb::server {

using Clock = std::chrono::steady_clock;

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id, model, system_fingerprint;
  std::int64_t created = 0;  // unix seconds
  ChatMode mode = ChatMode::kChat;
  bool tools = false;
  std::string echo_text;                   // completions with echo: the prompt text
  std::vector<runtime::TokenId> prompt;    // for echo logprobs
};

class Generation {
 public:
  Generation(ResponseMeta meta, GenerationParams params, std::shared_ptr<Exchange> exchange, const Tokenizer& tokenizer,
             ServerMetrics& metrics, Clock::time_point arrival);

  void set_request_ids(std::vector<runtime::RequestId> ids) { ids_ = std::move(ids); }
  const std::vector<runtime::RequestId>& request_ids() const { return ids_; }
  // The engine's event for choice `choice`, stamped when the engine delivered it.
  void on_event(int choice, const runtime::Event& event, Clock::time_point at);
  // Shutdown after the drain timeout: the cancellations that follow end the response with an
  // error instead of a normal finish.
  void mark_shutdown() { shutdown_ = true; }
  bool done() const { return done_; }  // read from other threads (ApiServer::active_generations)

 private:
  struct Choice {
    explicit Choice(ChatMode mode, bool tools) : parser(mode, tools) {}
    CompletionParser parser;
    std::string text;  // completions: all text
    ParsedCompletion parsed;
    nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();  // chat: content entries
    nlohmann::ordered_json completion_logprobs;                         // completions: the four arrays
    bool started = false, finished = false;
    runtime::FinishReason finish = runtime::FinishReason::kNone;
    std::string error;
    std::int64_t completion_tokens = 0, reasoning_tokens = 0;
    std::optional<Clock::time_point> last_token;
  };

  void record_timing(Choice& c, const runtime::Event& e, Clock::time_point at);
  void add_logprobs(Choice& c, const runtime::Event& e, nlohmann::ordered_json* chunk_logprobs);
  void stream_event(int index, Choice& c, const runtime::Event& e);
  void stream_final(int index, Choice& c, const CompletionParser::Delta& last);
  void finish_all();
  std::string finish_reason(const Choice& c) const;
  nlohmann::ordered_json chunk(nlohmann::ordered_json choices) const;
  nlohmann::ordered_json usage() const;
  nlohmann::ordered_json whole_response() const;
  void send(const nlohmann::ordered_json& json);

  ResponseMeta meta_;
  GenerationParams params_;
  std::shared_ptr<Exchange> exchange_;
  const Tokenizer& tokenizer_;
  ServerMetrics& metrics_;
  Clock::time_point arrival_;
  std::vector<Choice> choices_;
  std::vector<runtime::RequestId> ids_;
  std::int64_t prompt_tokens_ = 0, cached_tokens_ = 0;
  int finished_ = 0;
  bool shutdown_ = false;
  std::atomic<bool> done_{false};
};

// JSON text for the wire: invalid UTF-8 (a token that ends mid-character) becomes U+FFFD.
std::string wire_json(const nlohmann::ordered_json& json);

}  // namespace plumb::server
