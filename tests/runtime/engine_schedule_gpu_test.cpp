// Issue 15 item 6 without threads or timing: the steps the engine runs for three requests under a
// 7-token budget (blocks of 128 positions; one request decoding beside the others' prefill
// chunks), planned by the engine's own Scheduler and KvBlockManager (engine_schedule.h), fed to
// the CPU backend and to the GPU backend in the CPU's order (PLUMB_GPU_ORDER=cpu), faithful
// numerics. Per variant it reports three verdicts:
//   gpu-vs-cpu     every tap and logit of every forward bitwise (else the first difference:
//                  forward, tap, row, request, position): a GPU op that depends on the batch;
//   batched-vs-alone on the CPU, and on the GPU: each request's logits as when it runs alone
//                  (the property EngineBatchingGpu checks through the engine).
// Variants: the default faithful storage (fp8 entries + fp4 keys), f32 storage (what
// EngineBatchingGpu's engines store: EngineOptions::faithful is false there), one request alone
// chunked by the same budget, two requests. Then the fast order's repeatability (last test).
// Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "engine_schedule.h"
#include "fake_engine_model.h"
#include "gpu_test_env.h"
#include "plumb/backend/device_facts.h"

namespace plumb::runtime {
namespace {

using namespace schedule;

constexpr std::int64_t kBlock = 128, kBlocks = 64;

struct Variant {
  std::string name;
  KvFormat format;
  std::vector<Req> reqs;
};

// The requests that differed in EngineBatchingGpu's first configuration (workload seed 43:
// requests 0, 1 and 5, prompts of 147, 53 and 26 tokens, priorities 1, 0, 0), arriving a few
// steps apart so that the first decodes while the others prefill.
std::vector<Req> three_requests(std::int64_t vocab) {
  return {random_req(1, 147, 12, vocab, 0, 1), random_req(2, 53, 17, vocab, 2), random_req(3, 26, 9, vocab, 5)};
}

SchedulerConfig budget_of_7() {
  SchedulerConfig c;
  c.max_seqs = 3;
  c.max_batch_tokens = 7;
  return c;
}

TEST(EngineScheduleGpu, V4FaithfulCpuOrderScheduleEqualsCpuAndAlone) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  testing::CpuOrderOnGpu order;
  const std::string dir = testing::kTinyKjv.string();
  const std::int64_t vocab = load_model_config(dir).vocab_size;
  const LoadOptions cpu{"cpu", 2, Numerics::Faithful};
  const KvFormat faithful = default_kv_format(Arch::DeepseekV4, true), f32{};
  const std::vector<Req> three = three_requests(vocab);
  const std::vector<Variant> variants = {
      {"3 requests, fp8+fp4 storage", faithful, three},
      {"(a) 3 requests, f32 storage", f32, three},
      {"(b) 1 request, same budget", faithful, {three[0]}},
      {"(c) 2 requests", faithful, {three[0], three[1]}},
  };
  for (const Variant& v : variants) {
    const std::vector<Step> steps = make_schedule(v.reqs, budget_of_7(), kBlock, kBlocks);
    ScheduleRunner on_gpu(dir, gpu, v.format, kBlock, kBlocks), on_cpu(dir, cpu, v.format, kBlock, kBlocks);
    const Lockstep run = lockstep(on_gpu, on_cpu, steps, v.reqs);
    const std::string& d = run.first_difference;
    std::printf("[schedule] %s: %zu forwards; gpu-vs-cpu: %s\n", v.name.c_str(), steps.size(),
                d.empty() ? "bitwise" : ("DIFFER, " + d).c_str());
    EXPECT_EQ(d, "") << v.name << ", GPU (cpu order) vs CPU on one schedule";
    for (auto [name, runner, batched] : {std::tuple{"gpu", &on_gpu, &run.a}, std::tuple{"cpu", &on_cpu, &run.b}}) {
      std::vector<std::vector<float>> alone;
      for (const Req& r : v.reqs) alone.push_back(runner->run(alone_schedule(r, kBlock, kBlocks), {r})[0]);
      const std::string diff = first_request_difference(*batched, alone, vocab);
      std::printf("[schedule] %s: batched-vs-alone on the %s: %s\n", v.name.c_str(), name,
                  diff.empty() ? "bitwise" : ("DIFFER, " + diff).c_str());
      EXPECT_EQ(diff, "") << v.name << ", batched vs alone on the " << name;
    }
  }
}

// The fast-order tests' schedule: the tiny model, faithful fp8 + fp4 storage, the three requests
// under the 7-token budget.
struct FastOrderSchedule {
  std::string dir = testing::kTinyKjv.string();
  std::int64_t vocab = load_model_config(dir).vocab_size;
  KvFormat faithful = default_kv_format(Arch::DeepseekV4, true);
  std::vector<Req> reqs = three_requests(vocab);
  std::vector<Step> steps = make_schedule(reqs, budget_of_7(), kBlock, kBlocks);
};

// The fast order (production's kernels) on the same schedule: two runs are bitwise equal forward
// by forward, every tap and logit (a kernel reading another's output before it is complete
// shows as a difference that moves between runs), and equal to a run with programmatic
// dependent launch off (PLUMB_GPU_PDL=off, kernels/launch.h: a kernel that reads an earlier
// kernel's output without waiting would read it stale, the same way each time). Faithful fp8 +
// fp4 storage; decode rows take the 1-row GEMV, prefill chunks of up to 7 rows the others.
TEST(EngineScheduleGpu, V4FaithfulFastOrderRepeatsBitwiseWithAndWithoutPdl) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  const FastOrderSchedule s;
  ScheduleRunner first(s.dir, gpu, s.faithful, kBlock, kBlocks), second(s.dir, gpu, s.faithful, kBlock, kBlocks);
  const Lockstep run = lockstep(first, second, s.steps, s.reqs);
  std::printf("[schedule] fast order, %zu forwards, run vs run: %s\n", s.steps.size(),
              run.first_difference.empty() ? "bitwise" : ("DIFFER, " + run.first_difference).c_str());
  EXPECT_EQ(run.first_difference, "") << "two fast-order runs of one schedule";
  std::vector<std::vector<float>> no_pdl;
  {
    test::ScopedEnv off("PLUMB_GPU_PDL", "off");
    ScheduleRunner plain(s.dir, gpu, s.faithful, kBlock, kBlocks);
    no_pdl = plain.run(s.steps, s.reqs);
  }
  // On Hopper, with kernels built for it, plumb's kernels must run with PDL (doctor's fact), or
  // the comparison below would be between two plain runs (the CUDA emulator, whose build targets
  // no architecture, has no PDL).
  const backend::GpuFacts facts = backend::query_gpu_facts();
  if (!std::getenv("PLUMB_GPU_PDL") && !facts.devices.empty() && facts.devices[0].arch == "sm_90" &&
      facts.targets.find("90") != std::string::npos) {
    EXPECT_TRUE(facts.devices[0].pdl) << "an sm_90 device, and the kernels launch without programmatic dependent launch";
  }
  const std::string diff = first_request_difference(run.a, no_pdl, s.vocab);
  std::printf("[schedule] fast order, PDL vs PLUMB_GPU_PDL=off: %s\n",
              diff.empty() ? "bitwise" : ("DIFFER, " + diff).c_str());
  EXPECT_EQ(diff, "") << "the fast order with and without programmatic dependent launch";
}

// The fast-order schedule run with `var`=`value` in the environment (read by each new backend)
// against a run without: the first request whose logits differ, "" when every forward's logits
// are bitwise the same (printed either way).
std::string differs_under(const LoadOptions& gpu, const char* var, const char* value) {
  const FastOrderSchedule s;
  ScheduleRunner plain(s.dir, gpu, s.faithful, kBlock, kBlocks);
  const std::vector<std::vector<float>> base = plain.run(s.steps, s.reqs);
  std::vector<std::vector<float>> with;
  {
    test::ScopedEnv set(var, value);
    ScheduleRunner switched(s.dir, gpu, s.faithful, kBlock, kBlocks);
    with = switched.run(s.steps, s.reqs);
  }
  const std::string diff = first_request_difference(base, with, s.vocab);
  std::printf("[schedule] fast order, %zu forwards, %s=%s vs default: %s\n", s.steps.size(), var, value,
              diff.empty() ? "bitwise" : ("DIFFER, " + diff).c_str());
  return diff;
}

// The same schedule with a decode step's rms_norm writing the act_fp8 copy of its output, which
// the linears and experts that quantize that output read (the default, GpuBackend::set_norm_act_fp8)
// against a run without the copies (PLUMB_GPU_ACT_QUANT=fused): every forward's logits bitwise the
// same. Every step here has at most 7 rows, so every norm of the tiny model writes a copy (a stale
// copy would show).
TEST(EngineScheduleGpu, V4FaithfulFastOrderSameWithNormActFp8Copies) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_ACT_QUANT", "fused"), "") << "the fast order without the norms' act_fp8 copies";
}

// The same schedule with wq_a + wkv, a CSA layer's two wq_b and the shared expert's w1 + w3 as one
// launch each where their GEMVs allow (the default, GpuBackend::set_linear_pairs) against a run of
// one launch each (PLUMB_GPU_LINEAR_PAIRS=off): every forward's logits bitwise the same.
TEST(EngineScheduleGpu, V4FaithfulFastOrderSameWithLinearPairs) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_LINEAR_PAIRS", "off"), "") << "the fast order without linear pairs";
}

// The same schedule with each decode step's q, kv and compressed entries through norm_rope's one
// launch (the default, GpuBackend::set_norm_rope) against a run of the norm, rope and quant_fp8
// launches (PLUMB_GPU_NORM_ROPE=off): every forward's logits bitwise the same.
TEST(EngineScheduleGpu, V4FaithfulFastOrderSameWithNormRope) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_NORM_ROPE", "off"), "") << "the fast order without norm_rope's one launch";
}

// The same schedule with each hc_pre's second pass and the norm after it in one launch
// (PLUMB_GPU_HC_NORM=on, GpuBackend::set_hc_norm) against the default run: every forward's logits
// bitwise the same.
TEST(EngineScheduleGpu, V4FaithfulFastOrderSameWithHcNorm) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_HC_NORM", "on"), "") << "the fast order with hc_pre's pass 2 and the norm in one";
}

// The same schedule with each decode step's independent chains (a layer's compressors and indexer
// weights beside its q path, the shared expert beside the routed ones: Backend::side_begin) on
// two streams (PLUMB_GPU_LANES=on), and with every side chain held back before it starts
// (=delayed: an op that read a side chain's output before the join, or a side op that read what the
// main chain overwrote, would see other values), against the default (one stream): every
// forward's logits bitwise the same.
TEST(EngineScheduleGpu, V4FaithfulFastOrderSameWithLanes) {
  LoadOptions gpu;
  if (const std::string why = testing::gpu_or_skip_reason(gpu, Numerics::Faithful); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_LANES", "on"), "") << "the fast order on two streams";
  EXPECT_EQ(differs_under(gpu, "PLUMB_GPU_LANES", "delayed"), "") << "the fast order with the side chains held back";
}

}  // namespace
}  // namespace plumb::runtime
