#pragma once
// The load generator of `plumb bench serve`: its own small HTTP/1.1 client (Boost.Beast on one
// Asio thread, every operation under a timeout) that streams OpenAI completions or chat
// completions and times each request from the SSE frames as they arrive. Asio stays inside the
// .cpp; callers see plain functions.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace plumb::cli::bench {

struct Url {
  std::string host, port;  // http only: "http://HOST[:PORT][/...]" (the path is ignored)
};
// Throws plumb::Error naming the URL and what was expected.
Url parse_url(const std::string& url);

struct ClientOptions {
  Url url;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model, api_key;
  double timeout_s = 60;  // connect, and each wait for bytes: a stalled server is an error, not a hang
  bool ignore_eos = false;
  double temperature = 0;
};

struct Prompt {
  nlohmann::json prompt;  // completions: text or token ids; chat: text or a messages array
  std::int64_t input_len = 0;   // tokens, when known (random dataset); else 0
  std::int64_t output_len = 0;  // max_tokens
};

// One request as the client saw it. Times in seconds from its own start.
struct RequestRecord {
  bool ok = false;
  std::string error;        // why not ok: transport, HTTP status and message, or an error event
  double start_s = 0;       // from the start of the run
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;          // gaps between frames that carried text
  std::int64_t input_tokens = 0;      // from the usage chunk (else the prompt's input_len)
  std::int64_t output_tokens = 0;     // from the usage chunk (else text frames)
};

struct LoadShape {
  std::int64_t max_concurrency = 0;  // 0: no limit
  double request_rate = 0;           // requests/s, Poisson arrivals; <= 0 or inf: all at once
  std::uint64_t seed = 0;
  double duration_s = 0;             // > 0: soak: cycle through the prompts until then
  double sample_interval_s = 10;     // soak: how often on_sample runs
};

struct LoadResult {
  std::vector<RequestRecord> records;
  double wall_s = 0;
};

// Runs the prompts (once, or cycling for duration_s) against the server; on_sample(t, /metrics
// body or "" if it failed) is called every sample_interval_s during a soak, and once at the end.
LoadResult run_load(const ClientOptions& client, const std::vector<Prompt>& prompts, const LoadShape& shape,
                    const std::function<void(double, const std::string&)>& on_sample = {});

// GET path; returns the body of a 200 answer; throws plumb::Error naming the URL and the cause.
std::string http_get(const ClientOptions& client, const std::string& path);

}  // namespace plumb::cli::bench
