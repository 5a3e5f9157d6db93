#pragma once
// /metrics: the engine's counters and memory gauges (EngineStats) and the server's latency
// histograms in the Prometheus text format. The metric names are a stable interface (dashboards
// use them).
#include <mutex>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"

namespace plumb::server {

// A Prometheus histogram: cumulative bucket counts at fixed upper bounds, a sum and a count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The "# TYPE" line, the _bucket lines (with le="+Inf"), _sum and _count.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  // per bound, not cumulative; one more for +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

struct ServerMetrics {
  ServerMetrics();
  Histogram time_to_first_token, inter_token_latency, e2e_request_latency;  // seconds
};

std::string render_metrics(const runtime::EngineStats& stats, const ServerMetrics& metrics);

}  // namespace plumb::server
