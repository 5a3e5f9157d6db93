// plumb_sampler_bench: what one sampled token costs on the host at a vocabulary's size, the
// Sampler (candidate list) against the whole-vocabulary form it replaced
// (tests/runtime/sampler_reference.h), which must pick the same tokens (checked here too).
// Logits: "zipf" (p ~ 1 / rank^1.1 over a random permutation, an LM-like tail) or "flat" (normal,
// sd 1). Then a step's batch of --batch sequences sampled one after another and on a pool of
// --threads, as the engine does (EngineOptions::sampling_threads).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "plumb/runtime/sampler.h"
#include "plumb/util/thread_pool.h"
#include "sampler_reference.h"

using namespace plumb;

namespace {

std::vector<float> make_logits(const std::string& kind, std::size_t vocab, std::mt19937_64& rng) {
  std::vector<float> l(vocab);
  if (kind == "flat") {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float& x : l) x = normal(rng);
    return l;
  }
  std::vector<std::uint32_t> rank(vocab);
  std::iota(rank.begin(), rank.end(), 0u);
  std::shuffle(rank.begin(), rank.end(), rng);
  for (std::size_t i = 0; i < vocab; ++i) l[i] = -1.1f * std::log(static_cast<float>(rank[i]) + 1.f);
  return l;
}

template <class F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_sampler_bench: host cost of one sampled token"};
  std::size_t vocab = 129280;
  int reps = 21;
  app.add_option("--vocab", vocab, "vocabulary size (V4: 129,280)");
  app.add_option("--reps", reps, "timed draws per row (median reported)");
  int batch = 32, threads = 8;
  app.add_option("--batch", batch, "sequences of one step, for the side-by-side timing");
  app.add_option("--threads", threads, "sampling threads for the side-by-side timing");
  CLI11_PARSE(app, argc, argv);
  std::mt19937_64 rng(1);
  fmt::print("| logits | temperature | top_k | top_p | whole vocabulary (ms) | candidate list (ms) | speed-up |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|\n");
  struct Row {
    const char* kind;
    float t;
    int k;
    float p;
  };
  for (const Row& r : {Row{"zipf", 0.f, 0, 1.f}, Row{"zipf", 1.f, 0, 1.f}, Row{"zipf", 0.7f, 0, 0.9f},
                       Row{"zipf", 1.f, 0, 0.95f}, Row{"zipf", 0.6f, 40, 0.95f}, Row{"flat", 1.f, 0, 0.95f}}) {
    const std::vector<float> logits = make_logits(r.kind, vocab, rng);
    SamplingParams params;
    params.temperature = r.t, params.top_k = r.k, params.top_p = r.p, params.seed = 5;
    Sampler sampler(params, vocab);
    std::mt19937_64 draws(params.seed);
    std::uint32_t fast = 0, whole = 0;
    const double t_fast = median_ms(reps, [&] { fast = sampler.sample(logits); });
    const double t_whole = median_ms(reps, [&] {
      if (r.t == 0.f) {  // the old greedy pick: argmax of a penalized copy
        const std::vector<float> copy = logits;
        whole = static_cast<std::uint32_t>(std::max_element(copy.begin(), copy.end()) - copy.begin());
        return;
      }
      const double u = static_cast<double>(draws() >> 11) * 0x1.0p-53;
      whole = reference_sampler::draw(reference_sampler::distribution(logits, params), u);
    });
    if (fast != whole) fmt::print("MISMATCH: the last draws picked {} and {}\n", fast, whole);
    fmt::print("| {} | {} | {} | {} | {:.3f} | {:.3f} | {:.1f}x |\n", r.kind, r.t, r.k, r.p, t_whole, t_fast, t_whole / t_fast);
  }
  // One step's batch: each sequence its own sampler and logits row (zipf, temperature 0.7, top-p 0.9).
  std::vector<std::vector<float>> rows;
  std::vector<Sampler> samplers;
  for (int b = 0; b < batch; ++b) {
    rows.push_back(make_logits("zipf", vocab, rng));
    SamplingParams params;
    params.temperature = 0.7f, params.top_p = 0.9f, params.seed = static_cast<std::uint64_t>(b);
    samplers.emplace_back(params, vocab);
  }
  std::vector<std::uint32_t> picked(static_cast<std::size_t>(batch));
  const auto sample_range = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) picked[static_cast<std::size_t>(b)] = samplers[static_cast<std::size_t>(b)].sample(rows[static_cast<std::size_t>(b)]);
  };
  ThreadPool pool(threads);
  const double serial = median_ms(reps, [&] { sample_range(0, batch); });
  const double side_by_side = median_ms(reps, [&] { pool.parallel_for(batch, 1, sample_range); });
  fmt::print("\nbatch of {} (zipf, temperature 0.7, top-p 0.9): one thread {:.2f} ms, {} threads {:.2f} ms ({:.1f}x)\n", batch,
             serial, pool.size(), side_by_side, serial / side_by_side);
}
