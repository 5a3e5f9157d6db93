// Scheduler and KV block manager as pure policy: synthetic workloads driven by a simulated engine
// (each completing chunk "samples" one token), checked against the invariants the engine relies
// on (budgets, chunk contiguity, block accounting, every request finishing with all its tokens)
// and against the ordering each policy promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "plumb/runtime/scheduler.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

struct Job {
  std::int64_t prompt = 1, max_new = 1;
  int priority = 0;
  std::int64_t arrive_step = 0;
};

struct Trace {
  std::map<std::uint64_t, std::int64_t> first_step, done_step;  // first chunk, finish
  std::vector<std::uint64_t> admission_order;
  std::int64_t steps = 0, preemptions = 0;
};

// Runs `jobs` (id = index) to completion and checks every step's plan.
Trace simulate(const SchedulerConfig& cfg, std::int64_t block_size, std::int64_t blocks, const std::vector<Job>& jobs,
               std::int64_t step_limit = 100000) {
  KvBlockManager pool(block_size, blocks);
  Scheduler sched(cfg, pool);
  Trace t;
  std::map<std::uint64_t, std::int64_t> computed, known, generated;
  std::size_t next = 0, finished = 0;
  std::vector<std::size_t> order(jobs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return jobs[a].arrive_step < jobs[b].arrive_step; });
  for (std::int64_t step = 0; finished < jobs.size(); ++step) {
    if (step >= step_limit) {
      ADD_FAILURE() << "no progress after " << step_limit << " steps";
      return t;
    }
    for (; next < order.size() && jobs[order[next]].arrive_step <= step; ++next) {
      const Job& j = jobs[order[next]];
      sched.add(order[next], j.prompt, j.max_new, j.priority);
      known[order[next]] = j.prompt;
    }
    const StepPlan plan = sched.schedule();
    EXPECT_LE(plan.tokens, cfg.max_batch_tokens);
    EXPECT_LE(static_cast<std::int64_t>(plan.chunks.size()), cfg.max_seqs);
    EXPECT_LE(sched.running(), cfg.max_seqs);
    EXPECT_LE(pool.used_blocks(), pool.total_blocks());
    for (std::uint64_t id : plan.preempted) computed[id] = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      EXPECT_EQ(c.start, computed[c.id]) << "chunk of " << c.id << " at step " << step << " is not contiguous";
      EXPECT_GE(c.count, 1);
      if (cfg.max_chunk_tokens > 0) {
        EXPECT_LE(c.count, cfg.max_chunk_tokens);
      }
      computed[c.id] += c.count;
      EXPECT_LE(computed[c.id], known[c.id]);
      EXPECT_EQ(c.completes, computed[c.id] == known[c.id]);
      EXPECT_GE(pool.blocks_for(computed[c.id]), 1);
      EXPECT_GE(static_cast<std::int64_t>(pool.table(c.id).size()), pool.blocks_for(computed[c.id]));
      if (!t.first_step.count(c.id)) {
        t.first_step[c.id] = step;
        t.admission_order.push_back(c.id);
      }
      if (!c.completes) continue;
      if (++generated[c.id] == jobs[c.id].max_new) {
        sched.finish(c.id);
        t.done_step[c.id] = step;
        ++finished;
      } else {
        sched.append_token(c.id);
        ++known[c.id];
      }
    }
    t.steps = step + 1;
  }
  t.preemptions = sched.preemptions();
  EXPECT_TRUE(sched.idle());
  EXPECT_EQ(pool.used_blocks(), 0) << "blocks leaked";
  return t;
}

TEST(KvBlockManager, ReservesGrowsAndReleases) {
  KvBlockManager pool(128, 4);
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(1), 1);
  EXPECT_EQ(pool.blocks_for(128), 1);
  EXPECT_EQ(pool.blocks_for(129), 2);
  ASSERT_TRUE(pool.reserve(7, 200));
  EXPECT_EQ(pool.table(7).size(), 2u);
  ASSERT_TRUE(pool.reserve(7, 100));  // never shrinks
  EXPECT_EQ(pool.table(7).size(), 2u);
  ASSERT_TRUE(pool.reserve(8, 256));
  EXPECT_FALSE(pool.reserve(7, 300));  // needs a fifth block: nothing changes
  EXPECT_EQ(pool.table(7).size(), 2u);
  EXPECT_EQ(pool.free_blocks(), 0);
  std::vector<BlockId> all(pool.table(7).begin(), pool.table(7).end());
  all.insert(all.end(), pool.table(8).begin(), pool.table(8).end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<BlockId>{0, 1, 2, 3}));  // each block owned once
  pool.release(8);
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_TRUE(pool.reserve(7, 300));
  pool.release(7);
  pool.release(99);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_THROW(KvBlockManager(0, 4), Error);
  EXPECT_THROW(KvBlockManager(128, 0), Error);
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  KvBlockManager pool(128, 8);
  Scheduler s({.max_batch_tokens = 32}, pool);
  s.add(1, 100, 3, 0);
  std::vector<std::int64_t> counts;
  for (int i = 0; i < 4; ++i) {
    const StepPlan p = s.schedule();
    ASSERT_EQ(p.chunks.size(), 1u);
    counts.push_back(p.chunks[0].count);
    EXPECT_EQ(p.chunks[0].completes, i == 3);
  }
  EXPECT_EQ(counts, (std::vector<std::int64_t>{32, 32, 32, 4}));
  s.append_token(1);
  const StepPlan d = s.schedule();
  ASSERT_EQ(d.chunks.size(), 1u);
  EXPECT_EQ(d.chunks[0].start, 100);
  EXPECT_EQ(d.chunks[0].count, 1);
  EXPECT_TRUE(d.chunks[0].completes);
  s.finish(1);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(Scheduler, DecodesAndPrefillChunksShareTheBudget) {
  KvBlockManager pool(128, 16);
  Scheduler s({.max_batch_tokens = 10}, pool);
  s.add(1, 4, 5, 0);
  EXPECT_EQ(s.schedule().tokens, 4);
  s.append_token(1);
  s.add(2, 50, 5, 0);
  const StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u);  // the running decode first
  EXPECT_EQ(p.chunks[0].count, 1);
  EXPECT_EQ(p.chunks[1].id, 2u);
  EXPECT_EQ(p.chunks[1].count, 9);
  EXPECT_FALSE(p.chunks[1].completes);
}

TEST(Scheduler, FcfsAdmitsByArrivalAndSrptByRemainingWork) {
  std::vector<Job> jobs = {{40, 40}, {5, 5}, {20, 20}, {1, 2}};
  const SchedulerConfig fcfs{.max_batch_tokens = 64, .max_seqs = 1};
  EXPECT_EQ(simulate(fcfs, 128, 16, jobs).admission_order, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  SchedulerConfig srpt = fcfs;
  srpt.policy = SchedulePolicy::kSrpt;
  // All arrive at step 0: SRPT takes the shortest first.
  EXPECT_EQ(simulate(srpt, 128, 16, jobs).admission_order, (std::vector<std::uint64_t>{3, 1, 2, 0}));
}

TEST(Scheduler, SrptPriorityBreaksTies) {
  std::vector<Job> jobs = {{5, 5, 0}, {5, 5, 3}, {5, 5, 1}};
  const SchedulerConfig srpt{.max_seqs = 1, .policy = SchedulePolicy::kSrpt};
  EXPECT_EQ(simulate(srpt, 128, 16, jobs).admission_order, (std::vector<std::uint64_t>{1, 2, 0}));
}

// One long request, then a short one arriving every step: pure SRPT would run only short ones
// while they keep coming. With aging the long one starts within the bound (it waits at most
// `bound` steps to reach the head, then for the one short request in flight to finish).
TEST(Scheduler, SrptAgingBoundsTheWait) {
  const std::int64_t bound = 20, shorts = 200;
  std::vector<Job> jobs = {{30, 30, 0, 0}};
  for (std::int64_t i = 0; i < shorts; ++i) jobs.push_back({1, 1, 0, i});  // one step each
  SchedulerConfig cfg{.max_batch_tokens = 64, .max_seqs = 1, .policy = SchedulePolicy::kSrpt,
                      .srpt_max_wait_steps = bound};
  const Trace aged = simulate(cfg, 128, 16, jobs);
  EXPECT_LE(aged.first_step.at(0), bound + 1);
  EXPECT_GE(aged.first_step.at(0), bound);  // it did wait: the shorts went first until then
  cfg.srpt_max_wait_steps = 1000000;          // no aging: the long request starves
  const Trace starved = simulate(cfg, 128, 16, jobs);
  EXPECT_GE(starved.first_step.at(0), shorts - 1);
}

TEST(Scheduler, PreemptsTheLowestPriorityLatestArrival) {
  KvBlockManager pool(128, 3);
  Scheduler s({.max_batch_tokens = 512, .max_seqs = 8}, pool);
  s.add(1, 128, 200, 0);  // 1 block now, more as it grows
  s.add(2, 100, 200, 5);  // higher priority
  s.add(3, 120, 200, 0);  // same priority as 1, later arrival
  StepPlan p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(pool.free_blocks(), 0);
  for (auto id : {1, 2, 3}) s.append_token(id);
  // Sequence 1 now needs a second block: the victim is 3 (priority 0, arrived after 1).
  p = s.schedule();
  EXPECT_EQ(p.preempted, (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(s.preemptions(), 1);
  EXPECT_EQ(s.waiting(), 1);
  ASSERT_EQ(p.chunks.size(), 2u);  // 2 (priority order first) and 1
  EXPECT_EQ(p.chunks[0].id, 2u);
  EXPECT_EQ(p.chunks[1].id, 1u);
  s.append_token(2);
  s.append_token(1);
  s.finish(2);
  // 3 comes back and recomputes its prompt and the token it generated: 121 tokens from 0.
  p = s.schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[1].id, 3u);
  EXPECT_EQ(p.chunks[1].start, 0);
  EXPECT_EQ(p.chunks[1].count, 121);
  EXPECT_TRUE(p.chunks[1].completes);
}

TEST(Scheduler, PreemptsItselfWhenItIsTheLowest) {
  KvBlockManager pool(128, 2);
  Scheduler s({.max_batch_tokens = 512, .max_seqs = 8}, pool);
  s.add(1, 128, 100, 1);
  s.add(2, 128, 100, 0);
  s.schedule();
  s.append_token(1);
  s.append_token(2);
  const StepPlan p = s.schedule();  // 1 takes 2's block; 2 is preempted and not scheduled
  EXPECT_EQ(p.preempted, (std::vector<std::uint64_t>{2}));
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(pool.table(1).size(), 2u);
  EXPECT_TRUE(pool.table(2).empty());
}

TEST(Scheduler, RefusesWhatCanNeverFit) {
  KvBlockManager pool(128, 2);
  Scheduler s({}, pool);
  EXPECT_TRUE(s.fits_ever(200, 57));  // 256 positions
  EXPECT_FALSE(s.fits_ever(200, 58));
  try {
    s.add(1, 200, 100, 0);
    FAIL() << "accepted a request larger than the pool";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV blocks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.add(2, 0, 1, 0), Error);
  EXPECT_THROW(s.add(3, 1, 0, 0), Error);
  EXPECT_THROW(Scheduler({.max_batch_tokens = 0}, pool), Error);
  EXPECT_THROW(parse_schedule_policy("lifo"), Error);
}

// Random workloads under both policies, several block sizes, budgets, chunk caps and pool sizes
// small enough to force preemption: the invariants of simulate() hold and everything finishes.
TEST(Scheduler, RandomWorkloadsKeepTheInvariants) {
  std::mt19937_64 rng(1234);
  std::int64_t preempting_runs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t block = 128 * (1 + static_cast<std::int64_t>(rng() % 3));
    SchedulerConfig cfg;
    cfg.policy = rng() % 2 ? SchedulePolicy::kSrpt : SchedulePolicy::kFcfs;
    cfg.max_batch_tokens = 1 + static_cast<std::int64_t>(rng() % 300);
    cfg.max_seqs = 1 + static_cast<std::int64_t>(rng() % 8);
    cfg.max_chunk_tokens = static_cast<std::int64_t>(rng() % 3) * 50;
    cfg.srpt_max_wait_steps = 1 + static_cast<std::int64_t>(rng() % 50);
    std::vector<Job> jobs;
    std::int64_t longest = 0;
    for (int i = 0; i < 25; ++i) {
      Job j{1 + static_cast<std::int64_t>(rng() % 400), 1 + static_cast<std::int64_t>(rng() % 200),
            static_cast<int>(rng() % 3), static_cast<std::int64_t>(rng() % 100)};
      longest = std::max(longest, j.prompt + j.max_new);
      jobs.push_back(j);
    }
    const std::int64_t blocks = (longest + block - 1) / block + static_cast<std::int64_t>(rng() % 4);
    const Trace t = simulate(cfg, block, blocks, jobs);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "trial " << trial;
      return;
    }
    EXPECT_EQ(t.done_step.size(), jobs.size());
    preempting_runs += t.preemptions > 0;
  }
  EXPECT_GT(preempting_runs, 0);
}

}  // namespace
}  // namespace plumb::runtime
