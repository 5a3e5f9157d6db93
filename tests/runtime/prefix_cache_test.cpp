// Prefix reuse (issue #15 item 9). The index and its pool accounting on their own; the engine
// with the scripted model (every logit depends on the whole token history, so a snapshot that
// lost or reordered anything changes the tokens); and the real tiny models, where every result
// with the cache must be bitwise the one without it: a chat-like continuation whose cached prefix
// is longer than the sliding window (the ring must come with the snapshot), a prompt that
// diverges inside a block, and the V3 fixture.
#include "plumb/runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "fake_engine_model.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/kv_layout.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

struct Dummy final : EngineModel::Sequence {};
const PrefixCache::TakeSnapshot dummy = [](std::span<const BlockId>) { return std::make_unique<Dummy>(); };

std::vector<TokenId> random_tokens(std::size_t n, std::uint64_t seed, std::uint32_t vocab = 300) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(n);
  for (TokenId& x : t) x = static_cast<TokenId>(2 + rng() % (vocab - 2));
  return t;
}

std::span<const TokenId> first(const std::vector<TokenId>& t, std::size_t n) { return std::span(t).first(n); }

TEST(PrefixCache, LongestCachedBoundaryThatLeavesATokenToFeed) {
  KvBlockManager pool(128, 100);
  PrefixCache cache(pool, 0);
  const std::vector<TokenId> t = random_tokens(400, 1);
  ASSERT_TRUE(cache.insert(first(t, 128), dummy));
  ASSERT_TRUE(cache.insert(first(t, 256), dummy));
  EXPECT_FALSE(cache.wants(first(t, 256)));   // already there
  EXPECT_FALSE(cache.wants(first(t, 200)));   // not a block boundary
  EXPECT_TRUE(cache.wants(first(t, 384)));
  EXPECT_EQ(cache.lookup(first(t, 300)).tokens, 256);
  EXPECT_EQ(cache.lookup(first(t, 257)).tokens, 256);
  EXPECT_EQ(cache.lookup(first(t, 256)).tokens, 128);  // the last token must be fed for its logits
  std::vector<TokenId> diverged(t.begin(), t.begin() + 300);
  diverged[200] ^= 1;  // inside the second block
  EXPECT_EQ(cache.lookup(diverged).tokens, 128);
  diverged[5] ^= 1;  // inside the first
  const PrefixCache::Hit none = cache.lookup(diverged);
  EXPECT_EQ(none.tokens, 0);
  EXPECT_EQ(none.state, nullptr);
  EXPECT_EQ(cache.lookup(first(t, 1)).tokens, 0);
}

TEST(PrefixCache, LookupsRememberSharedPrefixes) {
  KvBlockManager pool(128, 10);
  PrefixCache cache(pool, 0);
  const std::vector<TokenId> a = random_tokens(300, 2);
  std::vector<TokenId> b = a;
  b[270] ^= 1;  // shares the first two blocks with a, no snapshot anywhere
  EXPECT_EQ(cache.lookup(a).shared, 0);
  const PrefixCache::Hit h = cache.lookup(b);
  EXPECT_EQ(h.shared, 256);
  EXPECT_EQ(h.tokens, 0);
}

TEST(PrefixCache, SnapshotsAreChargedToThePoolAndEvictedLeastRecentlyUsedFirst) {
  KvBlockManager pool(128, 10);
  PrefixCache cache(pool, 1);  // each snapshot also takes one block for its fixed state
  const std::vector<TokenId> a = random_tokens(300, 3), b = random_tokens(300, 4), c = random_tokens(400, 5);
  ASSERT_TRUE(cache.insert(first(a, 256), dummy));  // 2 + 1 blocks
  ASSERT_TRUE(cache.insert(first(b, 128), dummy));  // 1 + 1
  EXPECT_EQ(pool.used_blocks(), 5);
  EXPECT_EQ(cache.held_blocks(), 5);
  cache.lookup(a);  // a is now the most recently used
  cache.unpin_all();
  EXPECT_TRUE(cache.reclaim(6));  // 5 free: b goes, a stays
  EXPECT_EQ(cache.lookup(b).tokens, 0);
  EXPECT_EQ(cache.lookup(a).tokens, 256);  // and is pinned now: nothing can be reclaimed
  EXPECT_FALSE(cache.reclaim(10));
  EXPECT_EQ(cache.held_blocks(), 3);
  cache.unpin_all();
  // A request holding the rest of the pool: a snapshot of 3 + 1 blocks cannot fit even without
  // a (3 blocks), so a stays; one of 2 + 1 blocks takes a's place.
  ASSERT_TRUE(pool.reserve(1, 7 * 128));
  EXPECT_FALSE(cache.insert(first(c, 384), dummy));
  EXPECT_EQ(cache.lookup(a).tokens, 256);
  cache.unpin_all();
  EXPECT_TRUE(cache.insert(first(c, 256), dummy));
  EXPECT_EQ(cache.lookup(a).tokens, 0);
  EXPECT_EQ(cache.lookup(c).tokens, 256);
  EXPECT_EQ(cache.snapshots(), 1);
  EXPECT_EQ(cache.held_blocks(), 3);
  EXPECT_EQ(pool.used_blocks(), 10);
}

// ---- the engine with the scripted model

using testing::FakeModel;
using testing::greedy_ignoring_eos;

struct FakeEngine {
  explicit FakeEngine(EngineOptions o = options()) {
    auto m = std::make_unique<FakeModel>(load_model_config(testing::kTinyKjv.string()));
    model = m.get();
    engine = start_engine(std::move(m), tokenizer(), o);
  }
  static EngineOptions options() {
    EngineOptions o;
    o.kv_block_size = 128;
    o.kv_blocks = 64;
    return o;
  }
  static std::shared_ptr<const Tokenizer> tokenizer() {
    static const auto t = std::make_shared<const Tokenizer>(Tokenizer::load(testing::kTinyKjv.string()));
    return t;
  }
  std::size_t vocab() const { return static_cast<std::size_t>(engine->vocab_size()); }
  FakeModel* model = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
};

TEST(EnginePrefixCache, AContinuationHitsAndGivesTheTokensOfAFullRead) {
  FakeEngine f;
  const std::vector<TokenId> a = random_tokens(300, 6, 6000);
  const RequestResult first = generate_one(*f.engine, greedy_ignoring_eos(a, 100));  // decode crosses 384 too
  EXPECT_EQ(first.cached_prompt_tokens, 0);
  std::vector<TokenId> b = a;  // the next "turn": the first, its answer, more
  b.insert(b.end(), first.tokens.begin(), first.tokens.end() - 1);
  for (TokenId t : random_tokens(20, 7, 6000)) b.push_back(t);
  const RequestResult second = generate_one(*f.engine, greedy_ignoring_eos(b, 10));
  EXPECT_EQ(second.cached_prompt_tokens, 384);
  EXPECT_EQ(second.tokens, testing::fake_greedy(b, 10, f.vocab(), 0, false));
  const EngineStats s = f.engine->stats();
  EXPECT_EQ(s.prefix_cache_hits_total, 3);
  EXPECT_EQ(s.prefix_cache_queries_total, 2 + 3);  // whole blocks before each prompt's last token
  EXPECT_EQ(s.kv_blocks_used, 0);  // snapshots are not held by any request
  f.engine->shutdown();
  EXPECT_GE(f.model->forks, 3);  // snapshots at 256 and 384, and the fork of the hit
  EXPECT_EQ(f.model->bad_forks, 0);
}

TEST(EnginePrefixCache, OffNeverForks) {
  EngineOptions o = FakeEngine::options();
  o.prefix_cache = false;
  FakeEngine f(o);
  const std::vector<TokenId> a = random_tokens(300, 8, 6000);
  generate_one(*f.engine, greedy_ignoring_eos(a, 4));
  const RequestResult again = generate_one(*f.engine, greedy_ignoring_eos(a, 4));
  EXPECT_EQ(again.cached_prompt_tokens, 0);
  EXPECT_EQ(again.tokens, testing::fake_greedy(a, 4, f.vocab(), 0, false));
  EXPECT_EQ(f.engine->stats().prefix_cache_hits_total, 0);
  f.engine->shutdown();
  EXPECT_EQ(f.model->forks, 0);
}

TEST(EnginePrefixCache, ASharedSystemPromptIsSnapshotAtItsLastBlockForLaterRequests) {
  FakeEngine f;
  const std::vector<TokenId> system = random_tokens(200, 9, 6000);
  auto with_question = [&](std::uint64_t seed) {
    std::vector<TokenId> p = system;
    for (TokenId t : random_tokens(300, seed, 6000)) p.push_back(t);
    return p;
  };
  // The first request snapshots its prompt's last block (384, past the system prompt); the
  // second sees that 128 tokens were shared and snapshots there; the third hits it.
  EXPECT_EQ(generate_one(*f.engine, greedy_ignoring_eos(with_question(10), 2)).cached_prompt_tokens, 0);
  EXPECT_EQ(generate_one(*f.engine, greedy_ignoring_eos(with_question(11), 2)).cached_prompt_tokens, 0);
  const std::vector<TokenId> third = with_question(12);
  const RequestResult r = generate_one(*f.engine, greedy_ignoring_eos(third, 5));
  EXPECT_EQ(r.cached_prompt_tokens, 128);
  EXPECT_EQ(r.tokens, testing::fake_greedy(third, 5, f.vocab(), 0, false));
}

TEST(EnginePrefixCache, PromptLogprobRequestsNeitherReadNorWrite) {
  FakeEngine f;
  const std::vector<TokenId> a = random_tokens(300, 13, 6000);
  generate_one(*f.engine, greedy_ignoring_eos(a, 2));  // snapshot at 256
  Request scored = greedy_ignoring_eos(a, 1);
  scored.prompt_logprobs = true;
  const RequestResult r = generate_one(*f.engine, scored);
  EXPECT_EQ(r.cached_prompt_tokens, 0);
  EXPECT_EQ(r.prompt_logprobs.size(), a.size() - 1);
}

TEST(EnginePrefixCache, SnapshotsGiveWayToRequestsInASmallPool) {
  // Room for one running request of 300 + 100 tokens (4 blocks) and one snapshot of 256 tokens
  // with its fixed state: each request's blocks must come from evicting earlier snapshots.
  const KvLayout layout = kv_layout(load_model_config(testing::kTinyKjv.string()), 128, KvFormat{});
  const std::int64_t state_blocks = (layout.state_bytes_per_seq + layout.bytes_per_block - 1) / layout.bytes_per_block;
  EngineOptions o = FakeEngine::options();
  o.kv_blocks = 4 + 2 + state_blocks;
  FakeEngine f(o);
  for (std::uint64_t i = 0; i < 6; ++i) {
    const std::vector<TokenId> p = random_tokens(300, 20 + i, 6000);
    const RequestResult r = generate_one(*f.engine, greedy_ignoring_eos(p, 100));
    EXPECT_EQ(r.finish, FinishReason::kLength) << r.error;
    EXPECT_EQ(r.tokens, testing::fake_greedy(p, 100, f.vocab(), 0, false)) << i;
  }
  const EngineStats s = f.engine->stats();
  EXPECT_EQ(s.preemptions_total, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  f.engine->shutdown();
  EXPECT_GE(f.model->forks, 6);  // a snapshot was taken (and later evicted) for each request
  EXPECT_EQ(f.model->bad_forks, 0);
}

// ---- the real tiny models: with the cache bitwise equal to without

const LoadOptions kCpu{"cpu", 2, Numerics::Reference};

struct Turns {
  std::vector<RequestResult> results;
  EngineStats stats;
};

// Runs `requests` one after another on one engine, each built from the results so far.
Turns run_turns(const std::string& dir, bool prefix_cache,
                const std::function<Request(std::size_t i, const std::vector<RequestResult>& so_far)>& next, std::size_t n) {
  EngineOptions o;
  o.kv_block_size = 128;
  o.kv_cache_mib = 256;
  o.prefix_cache = prefix_cache;
  auto engine = start_engine(load_engine_model(dir, kCpu), FakeEngine::tokenizer(), o);
  Turns t;
  for (std::size_t i = 0; i < n; ++i) t.results.push_back(generate_one(*engine, next(i, t.results)));
  t.stats = engine->stats();
  return t;
}

void expect_bitwise(const Turns& with, const Turns& without) {
  ASSERT_EQ(with.results.size(), without.results.size());
  for (std::size_t i = 0; i < with.results.size(); ++i) {
    const RequestResult &a = with.results[i], &b = without.results[i];
    EXPECT_EQ(a.finish, b.finish) << "request " << i << ": " << a.error << b.error;
    EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "request " << i;
    for (std::size_t k = 0; k < a.logprobs.size(); ++k)
      EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob) << "request " << i << " token " << k;
    EXPECT_EQ(b.cached_prompt_tokens, 0);
  }
}

// Turn 0: a 200-token prompt, 80 sampled tokens (the decode crosses 256). Turn 1: turn 0's
// prompt and answer and a new message: it continues from the snapshot at 256, four times the
// sliding window (64), so a snapshot without its ring would read a wrong window. Turn 2: turn
// 0's prompt changed at position 200 (inside its second block): only the first block is reused.
Request chat_turn(std::size_t i, const std::vector<RequestResult>& so_far, std::uint32_t vocab) {
  const std::vector<TokenId> first = random_tokens(200, 30, vocab);
  Request r;
  r.top_logprobs = 0;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 5 + i;
  r.ignore_eos = true;
  r.max_tokens = i == 0 ? 80 : 12;
  r.prompt = first;
  if (i == 1) {
    r.prompt.insert(r.prompt.end(), so_far[0].tokens.begin(), so_far[0].tokens.end() - 1);
    for (TokenId t : random_tokens(30, 31, vocab)) r.prompt.push_back(t);
  } else if (i == 2) {
    r.prompt.insert(r.prompt.end(), so_far[0].tokens.begin(), so_far[0].tokens.end() - 1);
    r.prompt[200] = r.prompt[200] == 2 ? 3 : 2;
  }
  return r;
}

void check_chat(const std::string& dir) {
  const auto vocab = static_cast<std::uint32_t>(load_model_config(dir).vocab_size);
  auto next = [&](std::size_t i, const std::vector<RequestResult>& so_far) { return chat_turn(i, so_far, vocab); };
  const Turns with = run_turns(dir, true, next, 3), without = run_turns(dir, false, next, 3);
  expect_bitwise(with, without);
  EXPECT_EQ(with.results[0].cached_prompt_tokens, 0);
  EXPECT_EQ(with.results[1].cached_prompt_tokens, 256);  // the ring case
  EXPECT_EQ(with.results[2].cached_prompt_tokens, 128);  // diverged inside the second block
  EXPECT_EQ(with.stats.prefix_cache_hits_total, 2 + 1);
  EXPECT_EQ(without.stats.prefix_cache_hits_total, 0);
}

TEST(EnginePrefixCacheModels, V4CachedPrefixesGiveBitwiseTheResultsOfAFullRead) { check_chat(testing::kTinyKjv.string()); }

TEST(EnginePrefixCacheModels, V3CachedPrefixesGiveBitwiseTheResultsOfAFullRead) {
  check_chat(std::string(PLUMB_TEST_DATA) + "/golden/v3/tiny-a");
}

}  // namespace
}  // namespace plumb::runtime
