// Correctness under batching on the real tiny model (models/tiny-kjv, CPU): a request's tokens and
// logprobs are bitwise identical whether it runs alone or among others, under both schedulers,
// at block sizes 128/256/512, small and large token budgets and chunk caps, under forced
// preemption, with random arrival times. Greedy requests alone are also checked against
// ModelV4::generate, the model's own single-sequence loop. A V3 fixture (tests/data/golden/v3/
// tiny-a, with tiny-kjv's tokenizer for the text) runs the same checks through the V3 adapter.
#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "fake_engine_model.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/model/model.h"
#include "plumb/runtime/local_engine.h"

namespace plumb::runtime {
namespace {

const LoadOptions kCpu{"cpu", 2, Numerics::Reference};

std::shared_ptr<const Tokenizer> tokenizer() {
  static const auto t = std::make_shared<const Tokenizer>(Tokenizer::load(testing::kTinyKjv.string()));
  return t;
}

std::vector<Request> workload(std::uint64_t seed, std::int64_t vocab) {
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

const std::string kV4 = testing::kTinyKjv.string();
const std::string kV3 = std::string(PLUMB_TEST_DATA) + "/golden/v3/tiny-a";

std::vector<RequestResult> run_alone(const std::vector<Request>& reqs, const std::string& dir = kV4) {
  EngineOptions o;
  o.kv_cache_mib = 256;
  o.scheduler.max_seqs = 1;
  auto engine = start_engine(load_engine_model(dir, kCpu), tokenizer(), o);
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
Batched run_batched(const std::vector<Request>& reqs, const EngineOptions& o, std::uint64_t seed,
                    const std::string& dir = kV4, std::uint64_t max_gap_us = 3000) {
  auto engine = start_engine(load_engine_model(dir, kCpu), tokenizer(), o);
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

void expect_same(const std::vector<RequestResult>& alone, const std::vector<RequestResult>& batched, const std::string& what) {
  for (std::size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(batched[i].finish, alone[i].finish) << what << " request " << i << ": " << batched[i].error;
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << what << " request " << i;
    ASSERT_EQ(batched[i].logprobs.size(), alone[i].logprobs.size()) << what << " request " << i;
    for (std::size_t k = 0; k < alone[i].logprobs.size(); ++k)
      EXPECT_EQ(batched[i].logprobs[k].logprob, alone[i].logprobs[k].logprob) << what << " request " << i << " token " << k;
  }
}

TEST(EngineBatching, AloneMatchesTheModelsOwnLoop) {
  const std::vector<Request> reqs = workload(1, load_model_config(testing::kTinyKjv.string()).vocab_size);
  const std::vector<RequestResult> alone = run_alone(reqs);
  auto model = load_model(testing::kTinyKjv.string(), kCpu);
  for (std::size_t i = 0; i < reqs.size(); i += 2) {  // the greedy ones
    Model::GenerateOptions g;
    g.max_new_tokens = reqs[i].max_tokens;
    EXPECT_EQ(alone[i].tokens, model->generate(reqs[i].prompt, g)) << "request " << i;
  }
}

TEST(EngineBatching, TokensDoNotDependOnTheCompany) {
  const std::int64_t vocab = load_model_config(testing::kTinyKjv.string()).vocab_size;
  std::mt19937_64 rng(99);
  for (std::uint64_t w = 0; w < 2; ++w) {
    const std::vector<Request> reqs = workload(10 + w, vocab);
    const std::vector<RequestResult> alone = run_alone(reqs);
    for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kSrpt})
      for (std::int64_t block : {128, 256, 512}) {
        EngineOptions o;
        o.kv_block_size = block;
        o.kv_cache_mib = 256;
        o.scheduler.policy = policy;
        o.scheduler.max_seqs = 2 + static_cast<std::int64_t>(rng() % 5);
        o.scheduler.max_batch_tokens = std::vector<std::int64_t>{7, 32, 300}[rng() % 3];
        o.scheduler.max_chunk_tokens = static_cast<std::int64_t>(rng() % 2) * 13;
        o.scheduler.srpt_max_wait_steps = 1 + static_cast<std::int64_t>(rng() % 20);
        const std::string what = fmt::format("workload {} {} block {} seqs {} budget {} chunk {}", w, to_string(policy),
                                             block, o.scheduler.max_seqs, o.scheduler.max_batch_tokens,
                                             o.scheduler.max_chunk_tokens);
        expect_same(alone, run_batched(reqs, o, rng()).results, what);
      }
  }
}

// A pool of 3 blocks of 128 positions for up to 4 sequences of up to 169 positions: sequences
// are preempted, requeued with what they generated, and recomputed.
TEST(EngineBatching, TokensSurvivePreemption) {
  const std::int64_t vocab = load_model_config(testing::kTinyKjv.string()).vocab_size;
  const std::vector<Request> reqs = workload(21, vocab);
  const std::vector<RequestResult> alone = run_alone(reqs);
  std::mt19937_64 rng(5);
  std::int64_t preemptions = 0;
  for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kSrpt}) {
    EngineOptions o;
    o.kv_block_size = 128;
    o.kv_blocks = 3;
    o.scheduler.policy = policy;
    o.scheduler.max_seqs = 4;
    o.scheduler.max_batch_tokens = 64;
    const Batched b = run_batched(reqs, o, rng(), kV4, 500);  // close together, so that they compete
    expect_same(alone, b.results, std::string("preemption ") + to_string(policy));
    preemptions += b.stats.preemptions_total;
    EXPECT_EQ(b.stats.kv_blocks_used, 0);
  }
  EXPECT_GT(preemptions, 0) << "the workload did not force a preemption";
}

TEST(EngineBatching, V3AloneMatchesItsLoopAndBatchedMatchesAlone) {
  const ModelConfig cfg = load_model_config(kV3);
  const std::vector<Request> reqs = workload(31, cfg.vocab_size);
  const std::vector<RequestResult> alone = run_alone(reqs, kV3);
  auto model = load_model(kV3, kCpu);
  for (std::size_t i = 0; i < reqs.size(); i += 2) {
    Model::GenerateOptions g;
    g.max_new_tokens = reqs[i].max_tokens;
    EXPECT_EQ(alone[i].tokens, model->generate(reqs[i].prompt, g)) << "request " << i;
  }
  std::int64_t preemptions = 0;
  for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kSrpt}) {
    EngineOptions o;
    o.kv_block_size = 128;
    o.kv_blocks = 3;  // forces preemption, as above
    o.scheduler.policy = policy;
    o.scheduler.max_seqs = 4;
    o.scheduler.max_batch_tokens = 24;
    const Batched b = run_batched(reqs, o, 7, kV3, 0);  // together, so that they compete for blocks
    expect_same(alone, b.results, std::string("v3 ") + to_string(policy));
    preemptions += b.stats.preemptions_total;
  }
  EXPECT_GT(preemptions, 0) << "the workload did not force a preemption";
}

}  // namespace
}  // namespace plumb::runtime
