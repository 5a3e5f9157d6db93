// The engine under concurrent use (ctest label `concurrency`, which the TSan job runs): several
// threads submit, cancel and read stats at once; every request gets exactly one final event,
// uncancelled ones get exactly their sequential tokens, and nothing is left behind.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "fake_engine_model.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/local_engine.h"

namespace plumb::runtime {
namespace {

TEST(EngineConcurrency, ManyThreadsSubmitCancelAndReadStats) {
  const ModelConfig cfg = load_model_config(testing::kTinyKjv.string());
  const auto vocab = static_cast<std::size_t>(cfg.vocab_size);
  const auto eos = static_cast<std::uint32_t>(cfg.eos_token_id);
  EngineOptions o;
  o.kv_cache_mib = 64;
  o.scheduler.max_seqs = 6;
  o.scheduler.max_batch_tokens = 40;
  auto engine = start_engine(std::make_unique<testing::FakeModel>(cfg), std::make_shared<const Tokenizer>(Tokenizer::load(testing::kTinyKjv.string())), o);

  constexpr int kThreads = 4, kPerThread = 12;
  struct Outcome {
    std::vector<TokenId> prompt;
    std::int64_t max_tokens = 0;
    RequestResult result;
    int finals = 0;
    bool cancel_sent = false;
  };
  std::vector<Outcome> outcomes(kThreads * kPerThread);
  std::mutex mu;
  std::atomic<int> done{0};
  std::atomic<bool> stop_stats{false};
  std::thread stats_reader([&] {
    while (!stop_stats) {
      const EngineStats s = engine->stats();
      EXPECT_LE(s.kv_blocks_used, s.kv_blocks_total);
      EXPECT_LE(s.running, o.scheduler.max_seqs);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t)
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      for (int i = 0; i < kPerThread; ++i) {
        Outcome& out = outcomes[static_cast<std::size_t>(t * kPerThread + i)];
        for (std::size_t k = 0, n = 1 + rng() % 30; k < n; ++k) out.prompt.push_back(static_cast<TokenId>(10 + rng() % 5000));
        Request r;
        r.prompt = out.prompt;
        r.max_tokens = out.max_tokens = 1 + static_cast<std::int64_t>(rng() % 25);
        r.sampling.greedy = true;
        const RequestId id = engine->submit(r, [&](const Event& e) {
          std::lock_guard lk(mu);
          out.result.add(e);
          if (e.final) {
            ++out.finals;
            ++done;
          }
        });
        if (rng() % 4 == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
          {
            std::lock_guard lk(mu);
            out.cancel_sent = true;
          }
          engine->cancel(id);
        }
      }
    });
  for (auto& c : clients) c.join();
  while (done < kThreads * kPerThread) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop_stats = true;
  stats_reader.join();
  engine->shutdown();

  std::lock_guard lk(mu);
  int cancelled = 0;
  for (const Outcome& out : outcomes) {
    EXPECT_EQ(out.finals, 1);
    const auto want = testing::fake_greedy(out.prompt, static_cast<std::size_t>(out.max_tokens), vocab, eos);
    if (out.result.finish == FinishReason::kCancelled) {
      EXPECT_TRUE(out.cancel_sent);
      ++cancelled;
      ASSERT_LE(out.result.tokens.size(), want.size());
      EXPECT_TRUE(std::equal(out.result.tokens.begin(), out.result.tokens.end(), want.begin()));
      continue;
    }
    EXPECT_EQ(out.result.tokens, want);
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.finished_total[static_cast<int>(FinishReason::kCancelled)], cancelled);
}

}  // namespace
}  // namespace plumb::runtime
