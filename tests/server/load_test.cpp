// plumb serve under load on the real tiny model (ctest label "concurrency"): 64 concurrent
// streaming clients get exactly the answers their requests get alone; memory stays flat across
// rounds; a client that leaves mid-stream has its request cancelled and its KV blocks freed
// within one engine step (seen through /metrics); a KV pool far too small for the offered load
// queues requests or refuses them with 429, and every request still ends well-formed.
#include <algorithm>
#include <atomic>
#include <random>

#include <fmt/format.h>

#include "real_server.h"

namespace plumb::test {
namespace {

using nlohmann::json;

const char* const kPrompts[] = {"In the beginning", "And God said", "Let there be light", "The LORD is my shepherd",
                                "And it came to pass", "Blessed are the", "For God so loved", "Thou shalt not",
                                "And the earth was", "Hear, O Israel", "Then said Jesus", "In the day that",
                                "And Moses spake", "The heavens declare", "Vanity of vanities", "Praise ye the LORD"};
constexpr int kPromptCount = 16;

// Greedy, streamed, with the sampled tokens' logprobs (a bitwise check of each logits row).
std::string completion_body(int prompt, int max_tokens) {
  return json{{"prompt", kPrompts[prompt]}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 0},
              {"stream", true},             {"stream_options", {{"include_usage", true}}}}
      .dump();
}
int max_tokens_of(int prompt) { return 4 + prompt % 5; }

// The exhaustion test's engine: 2 MiB for the KV pool and the fixed state (window rings,
// compressor sums: 288 KiB each in f32) of 6 sequences leave 4 blocks of 128 positions (72 KiB
// each), enough for 2 of its requests at full length.
constexpr std::int64_t kTinyPoolMib = 2, kExhaustSeqs = 6;

runtime::EngineOptions engine_options(std::int64_t max_seqs, std::int64_t kv_cache_mib) {
  runtime::EngineOptions o;
  o.scheduler.max_seqs = max_seqs;
  o.scheduler.max_batch_tokens = 512;
  o.kv_block_size = 128;
  o.kv_cache_mib = kv_cache_mib;
  return o;
}

class ServerLoad : public RealServerTest {
 protected:
  // Every prompt run alone, one after the other, on the server under test.
  std::vector<StreamedCompletion> alone() {
    std::vector<StreamedCompletion> out;
    for (int p = 0; p < kPromptCount; ++p) {
      out.push_back(read_completion(post("/v1/completions", completion_body(p, max_tokens_of(p)))));
      EXPECT_EQ(out.back().status, 200) << kPrompts[p];
      EXPECT_TRUE(out.back().done) << kPrompts[p];
      EXPECT_EQ(out.back().token_logprobs.size(), static_cast<std::size_t>(out.back().completion_tokens)) << kPrompts[p];
    }
    return out;
  }

  // `clients` threads at once, each sending `each` requests in a row (client c's k-th request
  // uses prompt (c + k) % 16); returns how many answers differed from `expected`.
  int concurrent_round(int clients, int each, const std::vector<StreamedCompletion>& expected, int offset = 0) {
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&, c] {
        for (int k = 0; k < each; ++k) {
          const int p = (c + k + offset) % kPromptCount;
          StreamedCompletion got;
          try {
            got = read_completion(post("/v1/completions", completion_body(p, max_tokens_of(p))));
          } catch (const std::exception& e) {
            got.error_type = e.what();
          }
          if (!(got == expected[static_cast<std::size_t>(p)])) {
            ++mismatches;
            ADD_FAILURE() << "client " << c << " request " << k << " (" << kPrompts[p] << "): status " << got.status << " text '"
                          << got.text << "' vs alone '" << expected[static_cast<std::size_t>(p)].text << "' " << got.error_type;
          }
        }
      });
    for (auto& t : threads) t.join();
    return mismatches.load();
  }

  void expect_idle() {
    EXPECT_TRUE(eventually([&] { return metric("plumb_requests_running") == 0 && metric("plumb_requests_waiting") == 0; }));
    EXPECT_EQ(metric("plumb_kv_blocks_used"), 0);
    EXPECT_EQ(http(port_, "GET", "/health").status, 200);
  }
};

TEST_F(ServerLoad, SixtyFourStreamingClientsGetTheirAnswersAlone) {
  start(engine_options(64, 256));
  const std::vector<StreamedCompletion> expected = alone();
  const double tokens_before = metric("plumb_generation_tokens_total");
  EXPECT_EQ(concurrent_round(64, 3, expected), 0);
  std::int64_t tokens = 0;
  for (int c = 0; c < 64; ++c)
    for (int k = 0; k < 3; ++k) tokens += expected[static_cast<std::size_t>((c + k) % kPromptCount)].completion_tokens;
  EXPECT_EQ(metric("plumb_generation_tokens_total") - tokens_before, static_cast<double>(tokens));
  EXPECT_EQ(metric("plumb_request_success_total{finish_reason=\"cancelled\"}"), 0);
  expect_idle();
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers' shadow memory and quarantine grow the RSS
#else
constexpr bool kSanitized = false;
#endif

// Rounds of 64 concurrent streams; the resident set after the first round (allocator arenas,
// thread stacks and the engine's buffers warmed up) is the baseline. Bound: measured on the
// 2-core build machine, rounds 1..6 read 58.8 59.3 59.6 60.2 60.2 61.5 MiB (+2.7 MiB, the test
// process with its 64 fresh client threads a round); 16 MiB is 6x that and below what keeping
// each request's sequence state would leak (about 290 KiB of window rings and compressor sums per
// request in f32: 64 x 5 requests, 90 MiB). It does not catch a few KiB per request; the soak in
// docs/PERF.md (the server alone, 251 requests, RSS 76.4 -> 76.4 MiB) is the finer check.
TEST_F(ServerLoad, MemoryStaysFlatAcrossRoundsOfSixtyFourStreams) {
  if (kSanitized) GTEST_SKIP() << "RSS is not the process's own under ASan/TSan (quarantine, shadow memory)";
  start(engine_options(64, 256));
  const std::vector<StreamedCompletion> expected = alone();
  constexpr int kRounds = 6;
  std::vector<long> rss;
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(concurrent_round(64, 1, expected, round), 0) << "round " << round;
    rss.push_back(resident_kib());
  }
  std::string trace;
  for (long r : rss) trace += fmt::format(" {:.1f}", r / 1024.0);
  std::printf("[ measurement ] RSS after each round of 64 streams (MiB):%s\n", trace.c_str());
  const long peak = *std::max_element(rss.begin() + 1, rss.end());
  EXPECT_LE(peak - rss[0], 16 * 1024) << "RSS grew from " << rss[0] << " KiB to " << peak << " KiB";
  expect_idle();
}

// The leaving client's request runs among three others that must not notice.
TEST_F(ServerLoad, ALeavingClientIsCancelledAndItsBlocksFreedWithinOneStep) {
  start(engine_options(16, 256));
  const std::vector<StreamedCompletion> expected = alone();
  std::thread companions([&] { EXPECT_EQ(concurrent_round(3, 4, expected), 0); });
  {
    Socket leaving(port_);
    leaving.send_all(request_text("POST", "/v1/completions",
                                  json{{"prompt", "And the LORD said unto Moses"}, {"max_tokens", 4000}, {"ignore_eos", true},
                                       {"temperature", 0}, {"stream", true}}
                                      .dump()));
    ASSERT_TRUE(leaving.read_until("data: "));
    // Polled: the engine publishes its stats at the end of a step, after it delivered the events.
    EXPECT_TRUE(eventually([&] { return metric("plumb_requests_running") >= 1 && metric("plumb_kv_blocks_used") >= 1; }));
  }  // closed mid-stream: 4000 tokens take far longer than this test
  companions.join();
  EXPECT_TRUE(eventually([&] { return metric("plumb_requests_running") == 0 && metric("plumb_kv_blocks_used") == 0; }));
  EXPECT_EQ(metric("plumb_request_success_total{finish_reason=\"cancelled\"}"), 1);
  const auto cancelled = engine_->cancelled();
  ASSERT_EQ(cancelled.size(), 1u);
  ASSERT_TRUE(cancelled[0].final_step.has_value());
  // A step already running when cancel() arrives finishes first; the next one is not taken.
  EXPECT_LE(*cancelled[0].final_step - cancelled[0].cancel_step, 1)
      << "cancelled at step " << cancelled[0].cancel_step << ", freed at step " << *cancelled[0].final_step;
  expect_idle();
}

// A pool of a few blocks for 6 sequences, at most 6 requests waiting, and 32 clients at once whose
// requests need 2 blocks each: the engine queues and preempts, the server refuses the overflow
// with 429, and every request ends well-formed: a full stream of exactly max_tokens tokens
// ending in [DONE], or an OpenAI error body. A request that could never fit gets a 400 that
// names the flag to raise.
TEST_F(ServerLoad, KvExhaustionQueuesOrRefusesAndEveryRequestEndsWellFormed) {
  server::ApiOptions api;
  api.max_queue = 6;
  start(engine_options(kExhaustSeqs, kTinyPoolMib), api);
  const auto total_blocks = static_cast<std::int64_t>(metric("plumb_kv_blocks_total"));
  constexpr int kClients = 32, kPromptTokens = 40, kMaxTokens = 120;  // 160 positions: 2 blocks of 128
  ASSERT_LT(total_blocks, kExhaustSeqs * 2) << "the pool must not hold every running request at full length:\n" << memory_table_;
  std::atomic<int> completed{0}, refused{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(c));
      json prompt = json::array();
      for (int k = 0; k < kPromptTokens; ++k) prompt.push_back(10 + rng() % 5000);
      const json body = {{"prompt", prompt}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"temperature", 0},
                         {"stream", true},   {"stream_options", {{"include_usage", true}}}};
      StreamedCompletion got;
      try {
        got = read_completion(post("/v1/completions", body.dump()));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << c << ": malformed answer: " << e.what();
        return;
      }
      if (got.status == 200 && got.done && got.finish_reason == "length" && got.completion_tokens == kMaxTokens &&
          got.error_type.empty())
        ++completed;
      else if (got.status == 429 && got.error_type == "rate_limit_error")
        ++refused;
      else
        ADD_FAILURE() << "client " << c << ": status " << got.status << ", finish '" << got.finish_reason << "', "
                      << got.completion_tokens << " tokens, error '" << got.error_type << "'";
    });
  for (auto& t : clients) t.join();
  std::printf("[ measurement ] %d clients, pool of %lld blocks: %d completed, %d refused (429), %g preemptions\n", kClients,
              static_cast<long long>(total_blocks), completed.load(), refused.load(), metric("plumb_preemptions_total"));
  EXPECT_EQ(completed + refused, kClients);
  EXPECT_GE(completed.load(), 4);
  EXPECT_GE(refused.load(), 1);

  const json never_fits = {{"prompt", "In the beginning"}, {"max_tokens", total_blocks * 128}, {"ignore_eos", true}};
  const HttpResponse r = post("/v1/completions", never_fits.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("--kv-cache-mb"), std::string::npos) << r.body;
  expect_idle();
}

}  // namespace
}  // namespace plumb::test
