// Issue 15 item 6 on the GPU backend. With the GPU summing in the CPU backend's order
// (PLUMB_GPU_ORDER=cpu: every op bitwise the CPU's), a request's tokens and logprobs must be
// bitwise the same alone, batched with random arrivals under both schedulers, and under
// preemption, and equal to the CPU backend's. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <fmt/format.h>

#include "engine_batching_util.h"
#include "gpu_test_env.h"

namespace plumb::runtime {
namespace {

using namespace batching;
using testing::CpuOrderOnGpu;
using testing::gpu_or_skip_reason;

void batched_equals_alone_on_gpu(const std::string& dir, Numerics numerics, std::uint64_t seed) {
  LoadOptions gpu;
  if (const std::string why = gpu_or_skip_reason(gpu, numerics); !why.empty()) GTEST_SKIP() << why;
  CpuOrderOnGpu order;
  const std::vector<Request> reqs = workload(seed, load_model_config(dir).vocab_size);
  LoadOptions cpu = kCpu;
  cpu.numerics = numerics;
  const std::vector<RequestResult> alone_cpu = run_alone(reqs, dir, cpu);
  const std::vector<RequestResult> alone = run_alone(reqs, dir, gpu);
  expect_same(alone_cpu, alone, "GPU (cpu order) alone vs CPU alone");
  // The batched runs below use blocks of 128 positions (32 CSA entries, 1 HCA entry each) and
  // small budgets; this one changes only the block size, so a failure here is the paged storage's.
  expect_same(alone, run_alone(reqs, dir, gpu, 128), "GPU alone, blocks of 128 vs the default");
  std::mt19937_64 rng(seed);
  for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kSrpt}) {
    EngineOptions o;
    o.kv_block_size = 128;
    o.kv_cache_mib = 256;
    o.scheduler.policy = policy;
    o.scheduler.max_seqs = 2 + static_cast<std::int64_t>(rng() % 5);
    o.scheduler.max_batch_tokens = std::vector<std::int64_t>{7, 32, 300}[rng() % 3];
    expect_same(alone, run_batched(reqs, o, rng(), dir, 3000, gpu).results,
                fmt::format("GPU {} seqs {} budget {}", to_string(policy), o.scheduler.max_seqs, o.scheduler.max_batch_tokens));
  }
  EngineOptions tight;  // 3 blocks of 128 positions for 4 sequences: preemption by recompute
  tight.kv_block_size = 128;
  tight.kv_blocks = 3;
  tight.scheduler.max_seqs = 4;
  tight.scheduler.max_batch_tokens = 64;
  const Batched b = run_batched(reqs, tight, rng(), dir, 0, gpu);
  expect_same(alone, b.results, "GPU under preemption");
  EXPECT_GT(b.stats.preemptions_total, 0) << "the workload did not force a preemption";
}

TEST(EngineBatchingGpu, V4CpuOrderBatchedEqualsAloneEqualsCpu) { batched_equals_alone_on_gpu(kV4, Numerics::Reference, 41); }
TEST(EngineBatchingGpu, V4FaithfulCpuOrderBatchedEqualsAloneEqualsCpu) {
  batched_equals_alone_on_gpu(kV4, Numerics::Faithful, 43);
}
TEST(EngineBatchingGpu, V3CpuOrderBatchedEqualsAloneEqualsCpu) { batched_equals_alone_on_gpu(kV3, Numerics::Reference, 47); }

}  // namespace
}  // namespace plumb::runtime
