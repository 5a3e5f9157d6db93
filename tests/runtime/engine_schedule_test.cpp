// The engine's steps without threads or timing (engine_schedule.h) on the CPU, tiny-kjv: a
// request's logits do not depend on the company it is scheduled in (three requests under a 7-token
// budget, blocks of 128, one decoding beside the others' prefill chunks, against each alone), and
// the lockstep comparison that engine_schedule_gpu_test.cpp relies on names the first difference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine_schedule.h"
#include "fake_engine_model.h"

namespace plumb::runtime {
namespace {

using namespace schedule;

constexpr std::int64_t kBlock = 128, kBlocks = 64;

const std::string& dir() {
  static const std::string d = testing::kTinyKjv.string();
  return d;
}

std::vector<Req> three_requests() {
  const std::int64_t vocab = load_model_config(dir()).vocab_size;
  return {random_req(1, 147, 12, vocab, 0, 1), random_req(2, 53, 17, vocab, 2), random_req(3, 26, 9, vocab, 5)};
}

std::vector<Step> budget_of_7(const std::vector<Req>& reqs) {
  SchedulerConfig c;
  c.max_seqs = 3;
  c.max_batch_tokens = 7;
  return make_schedule(reqs, c, kBlock, kBlocks);
}

// Batched under the schedule vs each request alone (one prefill, then decode steps), bitwise.
std::string batched_vs_alone(Numerics numerics, const KvFormat& format) {
  const std::vector<Req> reqs = three_requests();
  ScheduleRunner runner(dir(), {"cpu", 2, numerics}, format, kBlock, kBlocks);
  const std::vector<Step> steps = budget_of_7(reqs);
  const std::vector<std::vector<float>> batched = runner.run(steps, reqs);
  std::vector<std::vector<float>> alone;
  for (const Req& r : reqs) alone.push_back(runner.run(alone_schedule(r, kBlock, kBlocks), {r})[0]);
  return first_request_difference(batched, alone, runner.model().config().vocab_size);
}

TEST(EngineSchedule, TheScheduleMixesDecodeAndPrefillChunksUnderTheBudget) {
  const std::vector<Req> reqs = three_requests();
  const std::vector<Step> steps = budget_of_7(reqs);
  std::vector<std::int64_t> fed(reqs.size(), 0);
  bool decode_beside_prefill = false;
  for (const Step& s : steps) {
    std::int64_t tokens = 0;
    bool decode = false, prefill = false;
    for (const Chunk& c : s.chunks) {
      EXPECT_EQ(c.start, fed[c.req]) << "request " << c.req << " skips or repeats positions";
      fed[c.req] += c.count;
      tokens += c.count;
      (c.start >= reqs[c.req].prompt ? decode : prefill) = true;
    }
    EXPECT_LE(tokens, 7);
    decode_beside_prefill |= decode && prefill;
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(fed[i], static_cast<std::int64_t>(reqs[i].tokens.size()));
  EXPECT_TRUE(decode_beside_prefill);
}

TEST(EngineSchedule, ReferenceBatchedEqualsAlone) { EXPECT_EQ(batched_vs_alone(Numerics::Reference, {}), ""); }

// faithful lays out the attention's index row by each request's prompt length (index_row.h), so
// its chunks under the budget give the rows of one prefill (issue 15 item 6), in f32 storage and
// in the default fp8 entries + fp4 keys.
TEST(EngineSchedule, FaithfulBatchedEqualsAlone) {
  EXPECT_EQ(batched_vs_alone(Numerics::Faithful, {}), "");
  EXPECT_EQ(batched_vs_alone(Numerics::Faithful, default_kv_format(Arch::DeepseekV4, true)), "");
}

// Equal runs compare equal; runs that differ (reference vs faithful numerics: faithful rounds the
// first attention input to bf16) are caught at the first forward, with the tap and row named.
TEST(EngineSchedule, LockstepNamesTheFirstDifference) {
  const std::vector<Req> reqs = three_requests();
  const std::vector<Step> steps = budget_of_7(reqs);
  const std::vector<Step> first(steps.begin(), steps.begin() + 4);
  auto runner = [&](Numerics n, int threads) { return ScheduleRunner(dir(), {"cpu", threads, n}, {}, kBlock, kBlocks); };
  ScheduleRunner two_threads = runner(Numerics::Reference, 2), one_thread = runner(Numerics::Reference, 1);
  EXPECT_EQ(lockstep(two_threads, one_thread, first, reqs).first_difference, "");
  ScheduleRunner reference = runner(Numerics::Reference, 2), faithful = runner(Numerics::Faithful, 2);
  const std::string d = lockstep(reference, faithful, first, reqs).first_difference;
  EXPECT_EQ(d.rfind("forward 0 of 4 (request 0 [0, 7)): tap layer.0.", 0), 0u) << d;
  EXPECT_NE(d.find("(request 0 position "), std::string::npos) << d;
}

}  // namespace
}  // namespace plumb::runtime
