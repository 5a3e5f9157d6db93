// The engine loop over a model with scripted logits (fake_engine_model.h): tokens, finish rules,
// stop strings and stop ids, constraints, logprobs, prompt logprobs, cancellation, per-request
// errors, request validation and the memory table. Expected values are computed without the
// engine (replaying the fake's logits one sequence at a time).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>

#include "fake_engine_model.h"
#include "plumb/runtime/engine_request.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

using testing::FakeModel;
using testing::kTinyKjv;

struct Fixture {
  ModelConfig cfg = load_model_config(kTinyKjv.string());
  std::shared_ptr<const Tokenizer> tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(kTinyKjv.string()));
  std::size_t vocab = static_cast<std::size_t>(cfg.vocab_size);
  std::uint32_t eos = static_cast<std::uint32_t>(cfg.eos_token_id);
  FakeModel* model = nullptr;  // owned by the engine

  static EngineOptions options() {
    EngineOptions o;
    o.kv_cache_mib = 64;
    return o;
  }
  std::unique_ptr<Engine> start(const EngineOptions& o = options()) {
    auto m = std::make_unique<FakeModel>(cfg);
    model = m.get();
    return start_engine(std::move(m), tokenizer, o);
  }
};

Request greedy(std::vector<TokenId> prompt, std::int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.greedy = true;
  return r;
}

std::vector<TokenId> prompt_of(std::size_t n, std::uint32_t salt) {
  std::vector<TokenId> p;
  for (std::size_t i = 0; i < n; ++i) p.push_back(static_cast<TokenId>(testing::mix(salt * 1000 + i) % 5000 + 10));
  return p;
}

TEST(Engine, GreedyTokensMatchTheSequentialReplay) {
  Fixture f;
  auto engine = f.start();
  for (std::uint32_t salt : {1u, 2u, 3u}) {
    const auto prompt = prompt_of(5 + salt * 7, salt);
    const RequestResult r = generate_one(*engine, greedy(prompt, 12));
    const auto want = testing::fake_greedy(prompt, 12, f.vocab, f.eos);
    EXPECT_EQ(r.tokens, want);
    EXPECT_EQ(r.completion_tokens, static_cast<std::int64_t>(want.size()));
    EXPECT_EQ(r.prompt_tokens, static_cast<std::int64_t>(prompt.size()));
    EXPECT_EQ(r.finish, want.back() == f.eos ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(r.text, f.tokenizer->decode(want));
  }
}

// A sequence the fake ends with EOS (found by search, so the test does not depend on luck).
std::vector<TokenId> prompt_reaching_eos(const Fixture& f) {
  for (std::uint32_t salt = 0; salt < 200000; ++salt) {
    const auto p = prompt_of(3, salt);
    const auto g = testing::fake_greedy(p, 1, f.vocab, f.eos);
    if (g[0] == f.eos) return p;
  }
  ADD_FAILURE() << "no prompt whose next greedy token is EOS";
  return {1};
}

// A request the engine has taken in counts as waiting or running while the step it is in is still
// running (the soak of plumb bench serve saw 0 / 0 for 15-45 s after 64 submissions before).
TEST(Engine, StatsCountARequestWhileItsFirstStepRuns) {
  Fixture f;
  auto engine = f.start();
  f.model->hold = true;  // the first step waits until the test has read the stats
  std::atomic<bool> done{false};
  engine->submit(greedy(prompt_of(8, 1), 2), [&](const Event& e) {
    if (e.final) done = true;
  });
  bool counted = false;
  for (int i = 0; i < 5000 && !counted; ++i) {  // up to 5 s for the engine thread to take it in
    const EngineStats s = engine->stats();
    counted = s.running + s.waiting == 1 && s.steps_total == 0;
    if (!counted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  f.model->hold = false;
  EXPECT_TRUE(counted) << "stats: " << engine->stats().running << " running, " << engine->stats().waiting << " waiting";
  engine->shutdown();
  EXPECT_TRUE(done.load());
}

TEST(Engine, EosStopsUnlessIgnored) {
  Fixture f;
  auto engine = f.start();
  const auto prompt = prompt_reaching_eos(f);
  RequestResult r = generate_one(*engine, greedy(prompt, 10));
  EXPECT_EQ(r.tokens, std::vector<TokenId>{f.eos});  // delivered, as plumb generate --out-ids keeps it
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.text, "");
  Request keep = greedy(prompt, 10);
  keep.ignore_eos = true;
  r = generate_one(*engine, keep);
  EXPECT_EQ(r.tokens, testing::fake_greedy(prompt, 10, f.vocab, f.eos, false));
  EXPECT_EQ(r.finish, FinishReason::kLength);
}

TEST(Engine, StopTokenIdsAndStopStrings) {
  Fixture f;
  auto engine = f.start();
  const auto prompt = prompt_of(9, 77);
  const auto want = testing::fake_greedy(prompt, 20, f.vocab, f.eos);
  ASSERT_GE(want.size(), 6u);
  Request by_id = greedy(prompt, 20);
  by_id.stop_token_ids = {want[4]};
  RequestResult r = generate_one(*engine, by_id);
  const auto first = std::find(want.begin(), want.end(), want[4]);
  EXPECT_EQ(r.tokens, std::vector<TokenId>(want.begin(), first + 1));
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.text, f.tokenizer->decode(std::vector<TokenId>(want.begin(), first)));

  const std::string full = f.tokenizer->decode(want);
  const std::string stop = full.substr(full.size() / 2, 3);
  Request by_text = greedy(prompt, 20);
  by_text.stop_strings = {stop};
  r = generate_one(*engine, by_text);
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.text, full.substr(0, full.find(stop)));
}

class EvenIds final : public TokenConstraint {
 public:
  void mask(std::span<bool> allowed, std::int64_t remaining) override {
    for (std::size_t i = 1; i < allowed.size(); i += 2) allowed[i] = false;
    budgets.push_back(remaining);
  }
  void accept(TokenId t) override { seen.push_back(t); }
  bool done() const override { return seen.size() == 3; }
  std::vector<TokenId> seen;
  std::vector<std::int64_t> budgets;
};

TEST(Engine, ConstraintMasksAndEnds) {
  Fixture f;
  auto engine = f.start();
  auto c = std::make_shared<EvenIds>();
  Request r = greedy(prompt_of(6, 5), 50);
  r.ignore_eos = true;
  r.constraint = c;
  const RequestResult out = generate_one(*engine, r);
  ASSERT_EQ(out.tokens.size(), 3u);
  EXPECT_EQ(out.tokens, c->seen);
  for (TokenId t : out.tokens) EXPECT_EQ(t % 2, 0u);
  EXPECT_EQ(out.finish, FinishReason::kStop);
  EXPECT_EQ(c->budgets, (std::vector<std::int64_t>{50, 49, 48}));  // max_tokens less what was generated
}

TEST(Engine, LogprobsAndPromptLogprobs) {
  Fixture f;
  EngineOptions o = Fixture::options();
  o.scheduler.max_batch_tokens = 4;  // the prompt's rows come in several chunks
  auto engine = f.start(o);
  const auto prompt = prompt_of(11, 9);
  Request r = greedy(prompt, 3);
  r.top_logprobs = 2;
  r.prompt_logprobs = true;
  const RequestResult out = generate_one(*engine, r);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
  std::uint64_t h = 0;
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i) {
    h = testing::extend(h, prompt[i]);
    EXPECT_EQ(out.prompt_logprobs[i], token_logprob(testing::fake_logits(h, f.vocab, false), prompt[i + 1])) << i;
  }
  h = testing::extend(h, prompt.back());
  ASSERT_EQ(out.logprobs.size(), 3u);
  ASSERT_EQ(out.top_logprobs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const std::vector<float> l = testing::fake_logits(h, f.vocab, false);
    EXPECT_EQ(out.logprobs[i].token, out.tokens[i]);
    EXPECT_EQ(out.logprobs[i].logprob, token_logprob(l, out.tokens[i]));
    ASSERT_EQ(out.top_logprobs[i].size(), 2u);
    EXPECT_EQ(out.top_logprobs[i][0].token, out.tokens[i]);  // greedy picks the most likely
    EXPECT_GT(out.top_logprobs[i][0].logprob, out.top_logprobs[i][1].logprob);
    h = testing::extend(h, out.tokens[i]);
  }
}

TEST(Engine, TopLogprobsOrderAndTies) {
  const std::vector<float> l = {0.f, 2.f, 1.f, 2.f};
  const auto top = top_logprobs(l, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1u);
  EXPECT_EQ(top[1].token, 3u);
  EXPECT_EQ(top[2].token, 2u);
  const double lse = std::log(std::exp(0.0) + 2 * std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(top[0].logprob, 2.0 - lse, 1e-6);
}

TEST(Engine, OneRequestsErrorLeavesTheOthersAlone) {
  Fixture f;
  auto engine = f.start();
  std::vector<RequestResult> results(3);
  std::vector<std::promise<void>> done(3);
  std::vector<std::vector<TokenId>> prompts = {prompt_of(8, 1), prompt_of(8, 2), prompt_of(8, 3)};
  prompts[1][0] = testing::kPoison;
  for (std::size_t i = 0; i < 3; ++i)
    engine->submit(greedy(prompts[i], 8), [&, i](const Event& e) {
      results[i].add(e);
      if (e.final) done[i].set_value();
    });
  for (auto& d : done) d.get_future().wait();
  EXPECT_EQ(results[1].finish, FinishReason::kError);
  EXPECT_NE(results[1].error.find("non-finite"), std::string::npos) << results[1].error;
  for (std::size_t i : {0u, 2u}) EXPECT_EQ(results[i].tokens, testing::fake_greedy(prompts[i], 8, f.vocab, f.eos));
  EXPECT_EQ(engine->stats().finished_total[static_cast<int>(FinishReason::kError)], 1);
}

TEST(Engine, CancelEndsAtTheNextStepAndFreesBlocks) {
  Fixture f;
  auto engine = f.start();
  std::promise<void> started, ended;
  RequestResult r;
  bool first = true;
  Request long_one = greedy(prompt_of(5, 4), 50000);
  long_one.ignore_eos = true;
  const RequestId id = engine->submit(long_one, [&](const Event& e) {
    r.add(e);
    if (first) started.set_value();
    first = false;
    if (e.final) ended.set_value();
  });
  started.get_future().wait();
  engine->cancel(id);
  ended.get_future().wait();
  EXPECT_EQ(r.finish, FinishReason::kCancelled);
  EXPECT_LT(r.tokens.size(), 50000u);
  engine->cancel(id);  // finished: ignored
  engine->cancel(999);  // unknown: ignored
  generate_one(*engine, greedy(prompt_of(3, 1), 1));  // a step after the cancel has run
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.finished_total[static_cast<int>(FinishReason::kCancelled)], 1);
}

TEST(Engine, MaxTokensIsCappedByTheContext) {
  Fixture f;
  f.cfg.max_position_embeddings = 20;
  auto engine = f.start();
  Request r = greedy(prompt_of(15, 3), 100);
  r.ignore_eos = true;
  const RequestResult out = generate_one(*engine, r);
  EXPECT_EQ(out.tokens.size(), 5u);
  EXPECT_EQ(out.finish, FinishReason::kLength);
  EXPECT_THROW(engine->submit(greedy(prompt_of(20, 3), 1), [](const Event&) {}), Error);
}

void expect_refused(Engine& e, const Request& r, const std::string& words) {
  try {
    e.submit(r, [](const Event&) {});
    ADD_FAILURE() << "accepted; expected an error with '" << words << "'";
  } catch (const Error& ex) {
    EXPECT_NE(std::string(ex.what()).find(words), std::string::npos) << ex.what();
  }
}

TEST(Engine, ValidatesRequests) {
  Fixture f;
  EngineOptions o = Fixture::options();
  o.kv_cache_mib = 2;  // about ten blocks of 256 positions beside two sequences' state
  o.scheduler.max_seqs = 2;
  auto engine = f.start(o);
  expect_refused(*engine, greedy({}, 4), "prompt is empty");
  expect_refused(*engine, greedy({1, 2}, 0), "max_tokens");
  expect_refused(*engine, greedy({1, static_cast<TokenId>(f.vocab)}, 4), "outside the vocabulary");
  Request bad = greedy({1, 2}, 4);
  bad.sampling.temperature = -1;
  bad.sampling.greedy = false;
  EXPECT_THROW(engine->submit(bad, [](const Event&) {}), Error);
  Request lp = greedy({1, 2}, 4);
  lp.top_logprobs = 21;
  expect_refused(*engine, lp, "top_logprobs");
  Request stop = greedy({1, 2}, 4);
  stop.stop_token_ids = {static_cast<TokenId>(f.vocab)};
  expect_refused(*engine, stop, "stop token");
  expect_refused(*engine, greedy(prompt_of(10, 1), 1000000), "KV blocks");
  EXPECT_THROW(engine->submit(greedy({1}, 1), nullptr), Error);
}

TEST(Engine, ShutdownCancelsWhatIsLeftAndRefusesMore) {
  Fixture f;
  auto engine = f.start();
  std::atomic<int> finals{0};
  for (int i = 0; i < 5; ++i) {
    Request r = greedy(prompt_of(4, i), 1000000);
    r.ignore_eos = true;
    r.max_tokens = 50000;
    engine->submit(r, [&](const Event& e) { finals += e.final; });
  }
  engine->shutdown();
  EXPECT_EQ(finals.load(), 5);
  engine->shutdown();  // idempotent
  EXPECT_THROW(engine->submit(greedy({1}, 1), [](const Event&) {}), Error);
}

TEST(Engine, MemoryTableAndPoolErrors) {
  Fixture f;
  FakeModel m(f.cfg);
  EngineOptions o = Fixture::options();
  o.kv_cache_mib = 64;
  const std::string t = engine_memory_table(m, o);
  EXPECT_NE(t.find("KV pool"), std::string::npos) << t;
  EXPECT_NE(t.find("per-sequence state"), std::string::npos) << t;
  EXPECT_NE(t.find("(KV f32, indexer keys f32)"), std::string::npos) << t;  // reference: f32 storage
  EXPECT_NE(t.find("sized by    --kv-cache-mb"), std::string::npos) << t;
  {  // no --kv-cache-mb: a model without a device (the fake, like the CPU backend) keeps 4096 MiB
    EngineOptions autosized = o;
    autosized.kv_cache_mib = 0;
    const std::string a = engine_memory_table(m, autosized);
    EXPECT_NE(a.find("--kv-cache-mb 4096 (the default on the host)"), std::string::npos) << a;
    autosized.kv_cache_mib = 4096;
    EXPECT_EQ(a.substr(0, a.find("sized by")), engine_memory_table(m, autosized).substr(0, a.find("sized by")));
  }
  o.faithful = true;
  EXPECT_NE(engine_memory_table(m, o).find("(KV fp8, indexer keys fp4)"), std::string::npos);
  o.kv_dtype = KvDtype::kBF16;
  EXPECT_NE(engine_memory_table(m, o).find("(KV bf16, indexer keys fp4)"), std::string::npos);
  o.faithful = false;
  o.kv_dtype.reset();
  o.kv_block_size = 100;
  EXPECT_THROW(engine_memory_table(m, o), Error);
  o.kv_block_size = 256;
  o.kv_cache_mib = 1;
  o.scheduler.max_seqs = 100000;
  EXPECT_THROW(f.start(o), Error);
}

}  // namespace
}  // namespace plumb::runtime
