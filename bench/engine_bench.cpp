// plumb_engine_bench: the serving engine under load. N requests with input/output lengths drawn
// from ranges (seeded), at most C in flight at once (the next is submitted when one ends), for
// each C of --concurrency: output tokens/s, TTFT, TPOT and ITL (p50/p99), end-to-end latency.
// --compare-schedulers adds FCFS vs SRPT on a mixed workload (many short requests, some long),
// all submitted at once. Writes JSON (--json) and prints Markdown tables.
//
// Timing: event times are taken in the event callback on the engine thread, so they include the
// sampling and detokenization of the step but no client-side queueing.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "plumb/model/numerics.h"
#include "plumb/runtime/engine_model.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/util/error.h"

using namespace plumb;
using Clock = std::chrono::steady_clock;

namespace {

struct Range {
  std::int64_t lo = 1, hi = 1;
};

Range parse_range(const std::string& s) {  // "N" or "MIN:MAX"
  const auto colon = s.find(':');
  Range r;
  r.lo = std::stoll(s.substr(0, colon));
  r.hi = colon == std::string::npos ? r.lo : std::stoll(s.substr(colon + 1));
  if (r.lo < 1 || r.hi < r.lo) fail("bad length range '{}': expected N or MIN:MAX with 1 <= MIN <= MAX", s);
  return r;
}

struct Spec {
  std::int64_t input = 0, output = 0;
};

std::vector<Spec> draw(std::mt19937_64& rng, std::int64_t n, Range in, Range out) {
  std::vector<Spec> v;
  for (std::int64_t i = 0; i < n; ++i)
    v.push_back({std::uniform_int_distribution<std::int64_t>(in.lo, in.hi)(rng),
                 std::uniform_int_distribution<std::int64_t>(out.lo, out.hi)(rng)});
  return v;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::min<double>(v.size() - 1, std::floor(p * (v.size() - 1) + 0.5)))];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

struct Timeline {
  Clock::time_point submitted;
  std::vector<Clock::time_point> tokens;  // one per generated token
  Clock::time_point done;
};

// Runs `specs` with at most `concurrency` in flight; returns the per-request timelines and the
// wall time.
std::pair<std::vector<Timeline>, double> run(runtime::Engine& engine, const std::vector<Spec>& specs,
                                             std::int64_t concurrency, std::int64_t vocab, std::uint64_t seed) {
  std::vector<Timeline> t(specs.size());
  std::mutex mu;
  std::condition_variable changed;
  std::size_t in_flight = 0, finished = 0;
  std::mt19937_64 rng(seed);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    {
      std::unique_lock lk(mu);
      changed.wait(lk, [&] { return static_cast<std::int64_t>(in_flight) < concurrency; });
      ++in_flight;
    }
    runtime::Request r;
    for (std::int64_t k = 0; k < specs[i].input; ++k) r.prompt.push_back(static_cast<runtime::TokenId>(2 + rng() % (vocab - 2)));
    r.max_tokens = specs[i].output;
    r.ignore_eos = true;  // the drawn output length, exactly
    r.sampling.greedy = true;
    t[i].submitted = Clock::now();
    engine.submit(std::move(r), [&, i](const runtime::Event& e) {
      const auto now = Clock::now();
      std::lock_guard lk(mu);
      for (std::size_t k = 0; k < e.tokens.size(); ++k) t[i].tokens.push_back(now);
      if (!e.final) return;
      if (e.finish == runtime::FinishReason::kError) std::fprintf(stderr, "request %zu failed: %s\n", i, e.error.c_str());
      t[i].done = now;
      --in_flight;
      ++finished;
      changed.notify_all();
    });
  }
  std::unique_lock lk(mu);
  changed.wait(lk, [&] { return finished == specs.size(); });
  return {t, std::chrono::duration<double>(Clock::now() - start).count()};
}

nlohmann::json summarize(const std::vector<Timeline>& t, double wall) {
  std::vector<double> ttft, tpot, itl, latency;
  std::int64_t tokens = 0;
  const auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  for (const Timeline& r : t) {
    tokens += static_cast<std::int64_t>(r.tokens.size());
    latency.push_back(sec(r.submitted, r.done));
    if (r.tokens.empty()) continue;
    ttft.push_back(sec(r.submitted, r.tokens.front()));
    if (r.tokens.size() > 1)
      tpot.push_back(sec(r.tokens.front(), r.tokens.back()) / static_cast<double>(r.tokens.size() - 1));
    for (std::size_t k = 1; k < r.tokens.size(); ++k) itl.push_back(sec(r.tokens[k - 1], r.tokens[k]));
  }
  const auto ms = [](double s) { return s * 1e3; };
  std::vector<double> ttft_ms, latency_ms;  // per request, for latency CDFs (tools/plot_bench.py)
  for (double s : ttft) ttft_ms.push_back(ms(s));
  for (double s : latency) latency_ms.push_back(ms(s));
  return {{"requests", t.size()},
          {"per_request", {{"ttft_ms", ttft_ms}, {"latency_ms", latency_ms}}},
          {"output_tokens", tokens},
          {"wall_s", wall},
          {"output_tokens_per_s", static_cast<double>(tokens) / wall},
          {"ttft_ms", {{"p50", ms(percentile(ttft, 0.5))}, {"p99", ms(percentile(ttft, 0.99))}}},
          {"tpot_ms", {{"p50", ms(percentile(tpot, 0.5))}, {"p99", ms(percentile(tpot, 0.99))}}},
          {"itl_ms", {{"p50", ms(percentile(itl, 0.5))}, {"p99", ms(percentile(itl, 0.99))}}},
          {"latency_ms", {{"mean", ms(mean(latency))}, {"p50", ms(percentile(latency, 0.5))}, {"p99", ms(percentile(latency, 0.99))}}}};
}

void print_row(const std::string& label, const nlohmann::json& s) {
  std::printf("| %s | %.1f | %.1f / %.1f | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f |\n", label.c_str(),
              s["output_tokens_per_s"].get<double>(), s["ttft_ms"]["p50"].get<double>(), s["ttft_ms"]["p99"].get<double>(),
              s["tpot_ms"]["p50"].get<double>(), s["tpot_ms"]["p99"].get<double>(), s["itl_ms"]["p50"].get<double>(),
              s["itl_ms"]["p99"].get<double>(), s["latency_ms"]["mean"].get<double>(), s["latency_ms"]["p99"].get<double>());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_engine_bench: throughput and latency of the serving engine"};
  std::string model, backend = "cpu", numerics = "reference", input = "32:128", output = "16:64", json_out, concurrency = "1,4,16,64";
  int threads = 0;
  std::int64_t requests = 64, max_seqs = 64, max_batch_tokens = 2048, kv_cache_mb = 4096, block = 256;
  std::uint64_t seed = 1;
  bool compare = false;
  app.add_option("--model", model, "checkpoint directory")->required();
  app.add_option("--backend", backend, "compute backend")->capture_default_str();
  app.add_option("--numerics", numerics, "reference or faithful")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str();
  app.add_option("--requests", requests, "requests per run")->capture_default_str();
  app.add_option("--input-len", input, "prompt length N or MIN:MAX (uniform)")->capture_default_str();
  app.add_option("--output-len", output, "output length N or MIN:MAX (uniform)")->capture_default_str();
  app.add_option("--concurrency", concurrency, "comma-separated max requests in flight")->capture_default_str();
  app.add_option("--max-seqs", max_seqs, "engine --max-seqs")->capture_default_str();
  app.add_option("--max-batch-tokens", max_batch_tokens, "engine --max-batch-tokens")->capture_default_str();
  app.add_option("--kv-cache-mb", kv_cache_mb, "engine --kv-cache-mb")->capture_default_str();
  app.add_option("--kv-block-size", block, "engine --kv-block-size")->capture_default_str();
  app.add_option("--seed", seed, "workload seed")->capture_default_str();
  app.add_flag("--compare-schedulers", compare, "FCFS vs SRPT on a mixed workload (80% short, 20% long), all at once");
  app.add_option("--json", json_out, "write the record here");
  CLI11_PARSE(app, argc, argv);
  try {
    const LoadOptions run_opt{backend, threads, parse_numerics(numerics)};
    runtime::EngineOptions opt;
    opt.scheduler.max_seqs = max_seqs;
    opt.scheduler.max_batch_tokens = max_batch_tokens;
    opt.kv_cache_mib = kv_cache_mb;
    opt.kv_block_size = block;
    opt.faithful = run_opt.numerics == Numerics::Faithful;
    const auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(model));
    const auto start = [&](runtime::SchedulePolicy policy) {
      runtime::EngineOptions o = opt;
      o.scheduler.policy = policy;
      return runtime::start_engine(runtime::load_engine_model(model, run_opt), tokenizer, o);
    };
    nlohmann::json rec = {{"model", model}, {"backend", backend}, {"numerics", numerics}, {"threads", threads},
                          {"requests", requests}, {"input_len", input}, {"output_len", output}, {"max_seqs", max_seqs},
                          {"max_batch_tokens", max_batch_tokens}, {"kv_block_size", block}, {"seed", seed}};
    std::mt19937_64 rng(seed);
    const std::vector<Spec> specs = draw(rng, requests, parse_range(input), parse_range(output));
    std::printf("| concurrency | output tok/s | TTFT ms p50 / p99 | TPOT ms p50 / p99 | ITL ms p50 / p99 | latency ms mean / p99 |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const std::string& c : CLI::detail::split(concurrency, ',')) {
      const std::int64_t conc = std::stoll(c);
      auto engine = start(runtime::SchedulePolicy::kFcfs);
      const auto [t, wall] = run(*engine, specs, conc, engine->vocab_size(), seed);
      nlohmann::json s = summarize(t, wall);
      s["concurrency"] = conc;
      print_row(c, s);
      rec["concurrency"].push_back(s);
    }
    if (compare) {
      std::vector<Spec> mixed = draw(rng, requests * 4 / 5, {8, 32}, {4, 16});
      const std::vector<Spec> longer = draw(rng, requests - requests * 4 / 5, {128, 256}, {64, 128});
      mixed.insert(mixed.end(), longer.begin(), longer.end());
      std::shuffle(mixed.begin(), mixed.end(), rng);
      std::printf("\n| scheduler (mixed, all at once) | output tok/s | TTFT ms p50 / p99 | TPOT ms p50 / p99 | ITL ms p50 / p99 | latency ms mean / p99 |\n");
      std::printf("|---|---|---|---|---|---|\n");
      for (auto policy : {runtime::SchedulePolicy::kFcfs, runtime::SchedulePolicy::kSrpt}) {
        auto engine = start(policy);
        const auto [t, wall] = run(*engine, mixed, static_cast<std::int64_t>(mixed.size()), engine->vocab_size(), seed);
        nlohmann::json s = summarize(t, wall);
        s["scheduler"] = runtime::to_string(policy);
        print_row(runtime::to_string(policy), s);
        rec["schedulers"].push_back(s);
      }
    }
    if (!json_out.empty()) std::ofstream(json_out) << rec.dump(1) << "\n";
    return 0;
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb_engine_bench: error: %s\n", e.what());
    return 2;
  }
}
