// plumb bench serve --url URL [--dataset random|file] [--num-prompts N] [--max-concurrency C[,C...]]
// [--request-rate R|inf] [--ignore-eos] [--warmup N] [--duration S] [--result-json FILE]
// [--plot FILE.png]: a load generator for any OpenAI-compatible server (plumb serve, vLLM,
// SGLang), with vLLM's `bench serve` flags and metric definitions so numbers compare. One run per
// --max-concurrency value; --duration turns each into a soak that keeps C streams busy and
// samples the server's /metrics (and, with --server-pid, its resident memory) over time.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "cmd_bench_serve_dataset.h"
#include "cmd_bench_serve_report.h"
#include "commands.h"
#include "generation_flags.h"
#include "plumb/util/error.h"

namespace plumb::cli {
namespace {

using Json = nlohmann::json;

struct BenchServeArgs {
  std::string url, model, endpoint = "/v1/completions", api_key, request_rate = "inf", max_concurrency = "0";
  std::string result_json, plot;
  bench::DatasetOptions dataset;
  bench::ClientOptions client;
  std::int64_t warmup = 0, server_pid = 0;
  double duration_s = 0, sample_interval_s = 10;
};

double parse_rate(const std::string& s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  try {
    std::size_t used = 0;
    const double r = std::stod(s, &used);
    if (used == s.size() && r > 0) return r;
  } catch (const std::exception&) {
  }
  fail("--request-rate '{}': expected requests per second > 0, or inf", s);
}

std::vector<std::int64_t> parse_concurrency(const std::string& list) {
  std::vector<std::int64_t> out;
  for (const std::string& c : CLI::detail::split(list, ',')) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(c, &used);
      if (used == c.size() && v >= 0) {
        out.push_back(v);
        continue;
      }
    } catch (const std::exception&) {
    }
    fail("--max-concurrency '{}': expected a comma-separated list of integers >= 0 (0: no limit)", list);
  }
  return out;
}

// Resident set of a process on this machine (Linux), in MiB; negative if it cannot be read.
double resident_mib(std::int64_t pid) {
  std::ifstream statm(fmt::format("/proc/{}/statm", pid));
  long pages = 0, resident = -1;
  if (!(statm >> pages >> resident)) return -1;
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

// One /metrics sample of a soak: the engine's gauges, any memory gauge the server exports, and
// the server process's RSS when its pid was given.
Json soak_sample(double t, const std::string& metrics, std::int64_t pid) {
  Json s = {{"t_s", t}, {"metrics_ok", !metrics.empty()}};
  for (const auto& [name, value] : bench::parse_metrics(metrics)) {
    const bool gauge = name == "plumb_requests_running" || name == "plumb_requests_waiting" || name == "plumb_kv_blocks_used";
    const bool memory = name.find("memory") != std::string::npos || name.find("resident") != std::string::npos ||
                        name.find("rss") != std::string::npos;
    if (gauge || memory) s[name] = value;
  }
  if (pid > 0) s["server_rss_mib"] = resident_mib(pid);
  return s;
}

void draw_plot(const std::string& result_json, const std::string& png) {
  // Debian's python3-matplotlib is for Debian's interpreter, which PATH may not find first.
  const char* python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string command =
      fmt::format("{} '{}/tools/plot_bench.py' '{}' --out '{}'", python, PLUMB_SOURCE_DIR, result_json, png);
  if (std::system(command.c_str()) != 0)
    std::fprintf(stderr, "plumb bench serve: the plot failed (it needs python3 and python3-matplotlib: scripts/install-deps.sh --plots); "
                 "the results are in %s\n", result_json.c_str());
}

int bench_serve(BenchServeArgs& a) {
  a.client.url = bench::parse_url(a.url);
  a.client.endpoint = a.endpoint;
  if (a.api_key.empty())
    for (const char* env : {"OPENAI_API_KEY", "PLUMB_API_KEY"})
      if (const char* key = std::getenv(env); key && a.api_key.empty()) a.api_key = key;
  a.client.api_key = a.api_key;
  bench::LoadShape shape;
  shape.request_rate = parse_rate(a.request_rate);
  shape.seed = a.dataset.seed;
  shape.duration_s = a.duration_s;
  shape.sample_interval_s = a.sample_interval_s;
  const std::vector<std::int64_t> concurrency = parse_concurrency(a.max_concurrency);
  if (!a.plot.empty() && a.result_json.empty()) a.result_json = a.plot + ".json";

  // The server must answer before any load is sent; it also names the model.
  const Json models = Json::parse(bench::http_get(a.client, "/v1/models"), nullptr, false);
  a.client.model = a.model;
  if (a.client.model.empty()) {
    if (!models.is_object() || !models.contains("data") || models["data"].empty() || !models["data"][0].contains("id"))
      fail("{}/v1/models does not list a model; pass --model NAME", a.url);
    a.client.model = models["data"][0]["id"];
  }
  const std::vector<bench::Prompt> prompts = bench::make_dataset(a.dataset);

  Json record = {{"url", a.url}, {"endpoint", a.endpoint}, {"model", a.client.model}, {"dataset", a.dataset.kind},
                 {"num_prompts", prompts.size()}, {"random_input_len", a.dataset.input_len},
                 {"random_output_len", a.dataset.output_len}, {"random_range_ratio", a.dataset.range_ratio},
                 {"request_rate", a.request_rate}, {"ignore_eos", a.client.ignore_eos}, {"seed", a.dataset.seed},
                 {"duration_s", a.duration_s}, {"runs", Json::array()}};
  std::int64_t completed = 0, failed = 0;
  std::string last_error;
  for (std::int64_t c : concurrency) {
    shape.max_concurrency = c;
    if (a.warmup > 0) {
      bench::LoadShape warm = shape;
      warm.duration_s = 0;
      warm.request_rate = 0;
      const std::vector<bench::Prompt> head(prompts.begin(), prompts.begin() + std::min<std::size_t>(prompts.size(), a.warmup));
      const Json w = bench::summarize(bench::run_load(a.client, head, warm));
      std::printf("warm-up: %lld requests, %lld failed\n", static_cast<long long>(head.size()),
                  static_cast<long long>(w["failed"].get<std::int64_t>()));
    }
    Json samples = Json::array();
    std::function<void(double, const std::string&)> on_sample;
    if (a.duration_s > 0) on_sample = [&](double t, const std::string& m) { samples.push_back(soak_sample(t, m, a.server_pid)); };
    const bench::LoadResult result = bench::run_load(a.client, prompts, shape, on_sample);
    const Json summary = bench::summarize(result);
    bench::print_summary(summary, fmt::format("max concurrency {}{}", c == 0 ? std::string("unlimited") : std::to_string(c),
                                              a.duration_s > 0 ? fmt::format(", soak {} s", a.duration_s) : ""));
    if (a.duration_s > 0 && !samples.empty()) {
      const Json& first = samples.front();
      const Json& last = samples.back();
      if (first.contains("server_rss_mib"))
        std::printf("%-34s %.1f -> %.1f\n", "Server RSS (MiB), start -> end:", first["server_rss_mib"].get<double>(),
                    last["server_rss_mib"].get<double>());
    }
    completed += summary["completed"].get<std::int64_t>();
    failed += summary["failed"].get<std::int64_t>();
    if (!summary["errors"].empty()) last_error = summary["errors"].begin().key();
    record["runs"].push_back({{"max_concurrency", c}, {"summary", summary}, {"requests", bench::per_request(result)}, {"samples", samples}});
  }
  if (!a.result_json.empty()) {
    std::ofstream out(a.result_json);
    if (!(out << record.dump(1) << "\n")) fail("--result-json {}: cannot write the file", a.result_json);
  }
  if (!a.plot.empty()) draw_plot(a.result_json, a.plot);
  if (completed == 0) fail("all {} requests failed; the last error: {}", failed, last_error);
  return 0;
}

}  // namespace

Runner register_bench(CLI::App& app) {
  auto* bench_cmd = app.add_subcommand("bench", "benchmarks against a running server");
  bench_cmd->require_subcommand(1);
  auto* cmd = bench_cmd->add_subcommand("serve", "load generator for an OpenAI-compatible server (TTFT, TPOT, ITL, E2E, throughput)");
  auto a = std::make_shared<BenchServeArgs>();
  cmd->add_option("--url", a->url, "the server, http://HOST:PORT")->required();
  cmd->add_option("--endpoint", a->endpoint, "API path")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->capture_default_str();
  cmd->add_option("--model", a->model, "model name to send (default: the first of /v1/models)");
  cmd->add_option("--api-key", a->api_key, "bearer key (default: env OPENAI_API_KEY or PLUMB_API_KEY)");
  cmd->add_option("--dataset", a->dataset.kind, "random or file")->check(CLI::IsMember({"random", "file"}))->capture_default_str();
  cmd->add_option("--dataset-path", a->dataset.path, "file: JSON lines {\"prompt\" | \"messages\", optional \"max_tokens\"}");
  cmd->add_option("--num-prompts", a->dataset.num_prompts, "requests per run")->check(at_least(1))->capture_default_str();
  cmd->add_option("--random-input-len", a->dataset.input_len, "random: prompt tokens")->check(at_least(1))->capture_default_str();
  cmd->add_option("--random-output-len", a->dataset.output_len, "random: max_tokens (and file prompts without one)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--random-range-ratio", a->dataset.range_ratio, "random: lengths uniform in len * [1 - r, 1 + r]")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  cmd->add_option("--random-vocab-size", a->dataset.vocab, "random: token ids are drawn from [100, N)")
      ->check(at_least(bench::kFirstRandomId + 1))
      ->capture_default_str();
  cmd->add_option("--max-concurrency", a->max_concurrency, "requests in flight at most; a comma-separated list runs each (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate, "requests/s with Poisson arrivals, or inf (all at once)")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->client.ignore_eos, "generate max_tokens tokens whatever the model says");
  cmd->add_option("--temperature", a->client.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "requests sent (and not counted) before each run")->check(at_least(0))->capture_default_str();
  cmd->add_option("--seed", a->dataset.seed, "seed of the dataset and the arrival times")->capture_default_str();
  cmd->add_option("--timeout", a->client.timeout_s, "seconds for a connect or for the next bytes of an answer")
      ->check(seconds(false))
      ->capture_default_str();
  cmd->add_option("--duration", a->duration_s, "soak: keep the streams busy this many seconds (0: send the prompts once)")
      ->check(seconds(true))
      ->capture_default_str();
  cmd->add_option("--sample-interval", a->sample_interval_s, "soak: seconds between /metrics samples")
      ->check(seconds(false))
      ->capture_default_str();
  cmd->add_option("--server-pid", a->server_pid, "soak: also sample this local process's resident memory")->check(at_least(0));
  cmd->add_option("--result-json", a->result_json, "write every run's summary and per-request times here");
  cmd->add_option("--plot", a->plot, "draw throughput vs concurrency and latency CDFs (tools/plot_bench.py, matplotlib)");
  return [a]() { return bench_serve(*a); };
}

}  // namespace plumb::cli
