#pragma once
// What `plumb bench serve` reports, with vLLM's `bench serve` definitions so numbers compare:
// TTFT (request sent -> first text frame), TPOT ((E2E - TTFT) / (output tokens - 1), requests
// with more than one token), ITL (gaps between text frames), E2E; mean, p50, p90, p99 (linear
// interpolation between order statistics, as numpy.percentile); throughputs over the run's wall
// time, output tokens from each stream's usage chunk.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cmd_bench_serve_client.h"

namespace plumb::cli::bench {

nlohmann::json summarize(const LoadResult& result);
// Per-request columns (for latency CDFs): ttft_ms, tpot_ms, e2e_ms, output_tokens, ok; and every ITL gap.
nlohmann::json per_request(const LoadResult& result);
// The Prometheus text's unlabelled samples (a label block is kept in the name: name{...}).
std::map<std::string, double> parse_metrics(const std::string& text);

void print_summary(const nlohmann::json& summary, const std::string& title);

}  // namespace plumb::cli::bench
