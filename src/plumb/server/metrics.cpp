#include "plumb/server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace plumb::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double value) {
  std::size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

// Bucket bounds as vLLM uses them, so dashboards built for it read ours.
ServerMetrics::ServerMetrics()
    : time_to_first_token({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                           40.0, 80.0, 160.0, 640.0, 2560.0}),
      inter_token_latency({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                           40.0, 80.0}),
      e2e_request_latency({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                           480.0, 960.0, 1920.0, 7680.0}) {}

namespace {

void gauge(std::string& out, const char* name, const char* help, std::int64_t value, const char* type = "gauge") {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

void counter(std::string& out, const char* name, const char* help, std::int64_t value) {
  gauge(out, name, help, value, "counter");
}

// One gauge per kind the backend knows; an unknown kind (-1) is left out rather than reported as 0.
void memory_gauges(std::string& out, const runtime::MemoryStats& m) {
  out += "# HELP plumb_memory_bytes Memory by kind: weights (on the GPU: uploaded so far; on the CPU: the mapped "
         "checkpoint), kv_pool, sequence_state, workspace, device_free, device_total (the CPU backend: host memory), "
         "host_rss.\n"
         "# TYPE plumb_memory_bytes gauge\n";
  const std::pair<const char*, std::int64_t> kinds[] = {
      {"weights", m.weights},           {"kv_pool", m.kv_pool},         {"sequence_state", m.sequence_state},
      {"workspace", m.workspace},       {"device_free", m.device_free}, {"device_total", m.device_total},
      {"host_rss", m.host_rss}};
  for (const auto& [kind, bytes] : kinds)
    if (bytes >= 0) out += fmt::format("plumb_memory_bytes{{kind=\"{}\"}} {}\n", kind, bytes);
}

}  // namespace

std::string render_metrics(const runtime::EngineStats& s, const ServerMetrics& m) {
  std::string out;
  gauge(out, "plumb_requests_running", "Requests in the running batch.", s.running);
  gauge(out, "plumb_requests_waiting", "Requests queued for admission.", s.waiting);
  gauge(out, "plumb_kv_blocks_used", "KV cache blocks in use.", s.kv_blocks_used);
  gauge(out, "plumb_kv_blocks_total", "KV cache blocks in the pool.", s.kv_blocks_total);
  counter(out, "plumb_prompt_tokens_total", "Prompt tokens processed.", s.prompt_tokens_total);
  counter(out, "plumb_generation_tokens_total", "Tokens generated.", s.generation_tokens_total);
  out += "# HELP plumb_request_success_total Finished requests by finish reason.\n"
         "# TYPE plumb_request_success_total counter\n";
  constexpr const char* kReasons[] = {"none", "stop", "length", "cancelled", "error"};
  for (int r = 1; r < 5; ++r)
    out += fmt::format("plumb_request_success_total{{finish_reason=\"{}\"}} {}\n", kReasons[r], s.finished_total[r]);
  counter(out, "plumb_preemptions_total", "Requests preempted to free KV blocks.", s.preemptions_total);
  counter(out, "plumb_prefix_cache_queries_total", "Prefix cache lookups, in blocks.", s.prefix_cache_queries_total);
  counter(out, "plumb_prefix_cache_hits_total", "Prefix cache hits, in blocks.", s.prefix_cache_hits_total);
  memory_gauges(out, s.memory);
  out += m.time_to_first_token.render("plumb_time_to_first_token_seconds", "Time from request arrival to its first token.");
  out += m.inter_token_latency.render("plumb_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
  out += m.e2e_request_latency.render("plumb_e2e_request_latency_seconds", "Time from request arrival to its last token.");
  return out;
}

}  // namespace plumb::server
