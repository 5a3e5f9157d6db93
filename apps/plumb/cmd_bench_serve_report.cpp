#include "cmd_bench_serve_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace plumb::cli::bench {
namespace {

using Json = nlohmann::json;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

Json stats_ms(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(s * 1e3);
  double sum = 0;
  for (double x : ms) sum += x;
  return {{"mean", ms.empty() ? 0 : sum / static_cast<double>(ms.size())},
          {"p50", percentile(ms, 50)},
          {"p90", percentile(ms, 90)},
          {"p99", percentile(ms, 99)}};
}

double tpot_s(const RequestRecord& r) { return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1); }

}  // namespace

Json summarize(const LoadResult& result) {
  std::vector<double> ttft, tpot, itl, e2e;
  std::int64_t completed = 0, input = 0, output = 0;
  std::map<std::string, std::int64_t> errors;
  for (const RequestRecord& r : result.records) {
    if (!r.ok) {
      ++errors[r.error];
      continue;
    }
    ++completed;
    input += r.input_tokens;
    output += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    if (r.output_tokens > 1) tpot.push_back(tpot_s(r));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  const double wall = result.wall_s > 0 ? result.wall_s : 1e-9;
  return {{"completed", completed},
          {"failed", static_cast<std::int64_t>(result.records.size()) - completed},
          {"errors", errors},
          {"duration_s", result.wall_s},
          {"total_input_tokens", input},
          {"total_output_tokens", output},
          {"request_throughput", static_cast<double>(completed) / wall},
          {"output_throughput", static_cast<double>(output) / wall},
          {"total_token_throughput", static_cast<double>(input + output) / wall},
          {"ttft_ms", stats_ms(ttft)},
          {"tpot_ms", stats_ms(tpot)},
          {"itl_ms", stats_ms(itl)},
          {"e2e_ms", stats_ms(e2e)}};
}

Json per_request(const LoadResult& result) {
  Json out = {{"ttft_ms", Json::array()}, {"tpot_ms", Json::array()}, {"e2e_ms", Json::array()},
              {"output_tokens", Json::array()}, {"ok", Json::array()}, {"itl_ms", Json::array()}};
  for (const RequestRecord& r : result.records) {
    out["ok"].push_back(r.ok);
    out["ttft_ms"].push_back(r.ttft_s * 1e3);
    out["e2e_ms"].push_back(r.e2e_s * 1e3);
    out["output_tokens"].push_back(r.output_tokens);
    out["tpot_ms"].push_back(r.ok && r.output_tokens > 1 ? Json(tpot_s(r) * 1e3) : Json(nullptr));
    if (r.ok)
      for (double g : r.itl_s) out["itl_ms"].push_back(g * 1e3);
  }
  return out;
}

std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {  // not a sample line
    }
  }
  return out;
}

void print_summary(const Json& s, const std::string& title) {
  std::printf("============ %s ============\n", title.c_str());
  std::printf("%-34s %lld\n", "Successful requests:", static_cast<long long>(s["completed"].get<std::int64_t>()));
  std::printf("%-34s %lld\n", "Failed requests:", static_cast<long long>(s["failed"].get<std::int64_t>()));
  for (const auto& [error, count] : s["errors"].items())
    std::printf("  %lld x %s\n", static_cast<long long>(count.get<std::int64_t>()), error.c_str());
  std::printf("%-34s %.2f\n", "Benchmark duration (s):", s["duration_s"].get<double>());
  std::printf("%-34s %lld\n", "Total input tokens:", static_cast<long long>(s["total_input_tokens"].get<std::int64_t>()));
  std::printf("%-34s %lld\n", "Total generated tokens:", static_cast<long long>(s["total_output_tokens"].get<std::int64_t>()));
  std::printf("%-34s %.2f\n", "Request throughput (req/s):", s["request_throughput"].get<double>());
  std::printf("%-34s %.2f\n", "Output token throughput (tok/s):", s["output_throughput"].get<double>());
  std::printf("%-34s %.2f\n", "Total token throughput (tok/s):", s["total_token_throughput"].get<double>());
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const Json& m = s[key];
    std::printf("%-8s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f\n", key, m["mean"].get<double>(), m["p50"].get<double>(),
                m["p90"].get<double>(), m["p99"].get<double>());
  }
}

}  // namespace plumb::cli::bench
