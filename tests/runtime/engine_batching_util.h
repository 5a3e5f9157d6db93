#pragma once
// Shared by the batching property tests (engine_batching_test.cpp on the CPU,
// engine_batching_gpu_test.cpp on the GPU backend): a mixed workload, runs alone and batched
// with random arrival times, and the bitwise comparison of their results.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_engine_model.h"
#include "plumb/model/model.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/local_engine.h"

namespace plumb::runtime::batching {

inline const LoadOptions kCpu{"cpu", 2, Numerics::Reference};

inline std::shared_ptr<const Tokenizer> tokenizer() {
  static const auto t = std::make_shared<const Tokenizer>(Tokenizer::load(testing::kTinyKjv.string()));
  return t;
}

inline std::vector<Request> workload(std::uint64_t seed, std::int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < 6; ++i) {
    Request r;
    for (std::size_t k = 0, n = 1 + rng() % 150; k < n; ++k) r.prompt.push_back(static_cast<TokenId>(2 + rng() % (vocab - 2)));
    r.max_tokens = 4 + static_cast<std::int64_t>(rng() % 16);
    r.top_logprobs = 0;  // the sampled token's logprob: a bitwise check of the logits row
    if (i % 2 == 0) {
      r.sampling.greedy = true;
    } else {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 40;
      r.sampling.seed = rng();
      r.ignore_eos = true;
    }
    r.priority = static_cast<int>(rng() % 2);
    out.push_back(std::move(r));
  }
  return out;
}

inline const std::string kV4 = testing::kTinyKjv.string();
inline const std::string kV3 = std::string(PLUMB_TEST_DATA) + "/golden/v3/tiny-a";

// Each request alone; block_size 0: the engine's default.
inline std::vector<RequestResult> run_alone(const std::vector<Request>& reqs, const std::string& dir = kV4,
                                           const LoadOptions& load = kCpu, std::int64_t block_size = 0) {
  EngineOptions o;
  o.kv_cache_mib = 256;
  if (block_size > 0) o.kv_block_size = block_size;
  o.scheduler.max_seqs = 1;
  auto engine = start_engine(load_engine_model(dir, load), tokenizer(), o);
  std::vector<RequestResult> out;
  for (const Request& r : reqs) out.push_back(generate_one(*engine, r));
  return out;
}

struct Batched {
  std::vector<RequestResult> results;
  EngineStats stats;
};

// Submits every request from another thread at random moments (gaps of up to `max_gap_us`) and
// waits for all of them.
inline Batched run_batched(const std::vector<Request>& reqs, const EngineOptions& o, std::uint64_t seed,
                           const std::string& dir = kV4, std::uint64_t max_gap_us = 3000,
                           const LoadOptions& load = kCpu) {
  auto engine = start_engine(load_engine_model(dir, load), tokenizer(), o);
  Batched b;
  b.results.resize(reqs.size());
  std::vector<std::promise<void>> done(reqs.size());
  std::thread client([&] {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % (max_gap_us + 1)));
      engine->submit(reqs[i], [&, i](const Event& e) {
        b.results[i].add(e);
        if (e.final) done[i].set_value();
      });
    }
  });
  client.join();
  for (auto& d : done) d.get_future().wait();
  b.stats = engine->stats();
  return b;
}

inline void expect_same(const std::vector<RequestResult>& alone, const std::vector<RequestResult>& batched, const std::string& what) {
  for (std::size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(batched[i].finish, alone[i].finish) << what << " request " << i << ": " << batched[i].error;
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << what << " request " << i;
    ASSERT_EQ(batched[i].logprobs.size(), alone[i].logprobs.size()) << what << " request " << i;
    for (std::size_t k = 0; k < alone[i].logprobs.size(); ++k)
      EXPECT_EQ(batched[i].logprobs[k].logprob, alone[i].logprobs[k].logprob) << what << " request " << i << " token " << k;
  }
}

// Batched runs of reqs (each checked against `alone`) until one preempts, at most `tries` runs
// with seeds seed, seed + 1, ...; returns that run's preemptions (0: none did). Whether requests
// compete for KV blocks depends on when the engine thread sees them: on a loaded machine the
// client thread can be descheduled between submits and the requests then run one after another
// (seen once under ctest -j2), so a single run cannot promise a preemption.
inline std::int64_t preemptions_within(int tries, const std::vector<RequestResult>& alone,
                                       const std::vector<Request>& reqs, const EngineOptions& o, std::uint64_t seed,
                                       const std::string& dir, std::uint64_t max_gap_us, const std::string& what,
                                       const LoadOptions& load = kCpu) {
  for (int t = 0; t < tries; ++t) {
    const Batched b = run_batched(reqs, o, seed + static_cast<std::uint64_t>(t), dir, max_gap_us, load);
    expect_same(alone, b.results, what + " (run " + std::to_string(t + 1) + ")");
    EXPECT_EQ(b.stats.kv_blocks_used, 0) << what;
    if (b.stats.preemptions_total > 0) return b.stats.preemptions_total;
  }
  return 0;
}

}  // namespace plumb::runtime::batching
