#pragma once
// The OpenAI-compatible API of `plumb serve` on top of runtime::Engine: routing, auth, request
// validation, submission (n choices, queue limit), disconnect -> cancel, health, metrics,
// tokenize, and the drain on shutdown. Transport-independent: HttpServer calls handle().
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/server/generation.h"
#include "plumb/server/generation_params.h"
#include "plumb/server/http_server.h"
#include "plumb/server/json_constraint.h"
#include "plumb/server/metrics.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::server {

struct ApiOptions {
  std::string model_name;          // what /v1/models lists and requests must name (if they name one)
  std::string api_key;             // empty: no auth; else "Authorization: Bearer KEY" on /v1/*, /tokenize, /detokenize
  std::int64_t max_queue = 256;    // waiting engine requests at most; beyond: 429
  std::string system_fingerprint = "plumb-0.1.0";
  GenerationDefaults defaults;
};

class ApiServer {
 public:
  ApiServer(runtime::Engine& engine, const Tokenizer& tokenizer, ApiOptions options);

  void handle(const HttpRequest& request, std::shared_ptr<Exchange> exchange);

  void set_ready(bool ready) { ready_ = ready; }  // /health: 200 when ready, 503 before
  // Draining: new generation requests get 503, /health 503; running ones go on.
  void begin_drain() { draining_ = true; }
  std::size_t active_generations() const;
  // After the drain timeout: cancel every running generation; each ends with an error event.
  void cancel_all();

 private:
  struct Active {
    std::weak_ptr<Generation> generation;
    std::weak_ptr<Exchange> exchange;
  };

  void route(const HttpRequest& request, const std::shared_ptr<Exchange>& exchange);
  void check_auth(const HttpRequest& request) const;
  void generate(const HttpRequest& request, const std::shared_ptr<Exchange>& exchange, Endpoint endpoint);
  void submit(std::shared_ptr<Generation> generation, const runtime::Request& request, int n, const std::shared_ptr<Exchange>& exchange,
              const std::optional<JsonMatcher>& json_output, bool thinking);
  std::string tokenize(const std::string& body) const;
  std::string detokenize(const std::string& body) const;
  std::string models() const;
  std::string next_id(Endpoint endpoint);
  void forget_finished();

  runtime::Engine& engine_;
  const Tokenizer& tokenizer_;
  ApiOptions options_;
  ServerMetrics metrics_;
  std::shared_ptr<const TokenTable> tokens_;  // for response_format constraints
  std::atomic<bool> ready_{true}, draining_{false};
  std::atomic<std::uint64_t> next_id_{1};
  mutable std::mutex active_mutex_;
  std::vector<Active> active_;
};

}  // namespace plumb::server
