#pragma once
// plumb serve's stack in this process on the real tiny model (models/tiny-kjv, CPU backend):
// LocalEngine -> ApiServer -> HttpServer on a free loopback port, with the engine behind a
// StepWatch that records, per request, the engine step at which cancel() was called and the one
// at which its final event arrived (how "freed within one engine step" is measured).
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "http_client.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/server/api_server.h"
#include "plumb/server/http_server.h"

namespace plumb::test {

inline const std::string kTinyKjvDir = std::string(PLUMB_SOURCE_DIR) + "/models/tiny-kjv";

class StepWatch final : public runtime::Engine {
 public:
  explicit StepWatch(std::unique_ptr<runtime::Engine> inner) : inner_(std::move(inner)) {}

  runtime::RequestId submit(runtime::Request request, runtime::EventFn on_event) override {
    // The id is known only after submit() returns; the callback may run before that, so it
    // finds its id in the event itself.
    return inner_->submit(std::move(request), [this, on_event = std::move(on_event)](const runtime::Event& e) {
      if (e.final) {
        const std::int64_t step = inner_->stats().steps_total;
        std::lock_guard lock(mutex_);
        final_step_[e.id] = step;
      }
      on_event(e);
    });
  }
  void cancel(runtime::RequestId id) override {
    {
      std::lock_guard lock(mutex_);
      cancel_step_.emplace(id, inner_->stats().steps_total);
    }
    inner_->cancel(id);
  }
  runtime::EngineStats stats() const override { return inner_->stats(); }
  std::int64_t max_context() const override { return inner_->max_context(); }
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }
  void shutdown() override { inner_->shutdown(); }

  struct Cancelled {
    runtime::RequestId id;
    std::int64_t cancel_step;
    std::optional<std::int64_t> final_step;
  };
  std::vector<Cancelled> cancelled() const {
    std::lock_guard lock(mutex_);
    std::vector<Cancelled> out;
    for (const auto& [id, step] : cancel_step_) {
      auto it = final_step_.find(id);
      out.push_back({id, step, it == final_step_.end() ? std::nullopt : std::optional(it->second)});
    }
    return out;
  }

 private:
  std::unique_ptr<runtime::Engine> inner_;
  mutable std::mutex mutex_;
  std::map<runtime::RequestId, std::int64_t> cancel_step_, final_step_;
};

inline std::shared_ptr<const Tokenizer> tiny_kjv_shared_tokenizer() {
  static const auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(kTinyKjvDir));
  return tokenizer;
}

// The server on the real engine; start() may be called once per test with the engine's options.
class RealServerTest : public ::testing::Test {
 protected:
  void start(runtime::EngineOptions engine, server::ApiOptions api = {}) {
    if (api.model_name.empty()) api.model_name = "tiny-kjv";
    auto model = runtime::load_engine_model(kTinyKjvDir, LoadOptions{"cpu", 2, Numerics::Reference});
    memory_table_ = runtime::engine_memory_table(*model, engine);
    engine_ = std::make_unique<StepWatch>(runtime::start_engine(std::move(model), tiny_kjv_shared_tokenizer(), engine));
    api_ = std::make_unique<server::ApiServer>(*engine_, *tiny_kjv_shared_tokenizer(), api);
    server::HttpServerOptions http;
    http.port = 0;
    server_ = std::make_unique<server::HttpServer>(http, [this](const server::HttpRequest& r, std::shared_ptr<server::Exchange> x) {
      api_->handle(r, std::move(x));
    });
    server_->start();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (engine_) engine_->shutdown();
  }

  HttpResponse post(const std::string& path, const std::string& body) { return http(port_, "POST", path, body); }

  // One value of /metrics, read over HTTP as a dashboard would: the line "NAME VALUE".
  double metric(const std::string& name) {
    const HttpResponse r = http(port_, "GET", "/metrics");
    const std::string key = "\n" + name + " ";
    const std::size_t at = ("\n" + r.body).find(key);
    if (r.status != 200 || at == std::string::npos) throw std::runtime_error("/metrics has no " + name);
    return std::stod(r.body.substr(at + key.size() - 1));
  }

  // Polls `condition` for up to 20 s (bounded: a broken server fails, never hangs).
  template <typename F>
  bool eventually(F condition) {
    for (int i = 0; i < 2000; ++i) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return condition();
  }

  std::string memory_table_;
  std::unique_ptr<StepWatch> engine_;
  std::unique_ptr<server::ApiServer> api_;
  std::unique_ptr<server::HttpServer> server_;
  int port_ = 0;
};

// Resident set size of this process from /proc/self/statm, in KiB.
inline long resident_kib() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// A streamed /v1/completions answer, checked for framing: every payload but the last "[DONE]"
// is JSON; text, token logprobs and finish reason are gathered from the chunks.
struct StreamedCompletion {
  int status = 0;
  std::string text, finish_reason, error_type;
  std::vector<double> token_logprobs;
  std::int64_t completion_tokens = -1;  // from the usage chunk
  bool done = false;                    // ended with data: [DONE]

  bool operator==(const StreamedCompletion& o) const {
    return status == o.status && text == o.text && finish_reason == o.finish_reason && token_logprobs == o.token_logprobs &&
           completion_tokens == o.completion_tokens && done == o.done;
  }
};

inline StreamedCompletion read_completion(const HttpResponse& r) {
  using nlohmann::json;
  StreamedCompletion out;
  out.status = r.status;
  if (r.status != 200) {
    out.error_type = json::parse(r.body).at("error").at("type").get<std::string>();
    return out;
  }
  const std::vector<std::string> payloads = sse_payloads(r.body);
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i] == "[DONE]") {
      if (i + 1 != payloads.size()) throw std::runtime_error("data: [DONE] is not the last frame");
      out.done = true;
      break;
    }
    const json chunk = json::parse(payloads[i]);
    if (chunk.contains("error")) {
      out.error_type = chunk["error"].at("type").get<std::string>();
      continue;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) out.completion_tokens = chunk["usage"].at("completion_tokens");
    for (const json& choice : chunk.at("choices")) {
      out.text += choice.at("text").get<std::string>();
      if (choice.at("logprobs").is_object())
        for (const json& lp : choice["logprobs"].at("token_logprobs")) out.token_logprobs.push_back(lp.get<double>());
      if (!choice.at("finish_reason").is_null()) out.finish_reason = choice["finish_reason"];
    }
  }
  return out;
}

}  // namespace plumb::test
