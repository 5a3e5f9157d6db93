// The engine's memory numbers: the pool and per-sequence state from the KV layout, the device's
// from the model's backend (asked on the engine thread), this process's RSS; the start-up table's
// device rows; EngineStats::memory refreshed while the engine runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "fake_engine_model.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/runtime/memory_stats.h"

namespace plumb::runtime {
namespace {

using testing::FakeModel;
using testing::kTinyKjv;

// The fake model with a scripted device_memory(), recording the thread that asks.
class DeviceModel final : public EngineModel {
 public:
  explicit DeviceModel(ModelConfig cfg) : fake_(std::move(cfg)) {}
  std::unique_ptr<Sequence> new_sequence() override { return fake_.new_sequence(); }
  void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat& format) override {
    fake_.use_kv_blocks(block_size, blocks, format);
  }
  std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from,
                                 std::span<const std::int32_t> to) override {
    return fake_.fork(seq, from, to);
  }
  std::vector<float> forward(std::span<const Chunk> batch) override { return fake_.forward(batch); }
  const ModelConfig& config() const override { return fake_.config(); }
  std::int64_t weight_bytes() const override { return 5000; }
  backend::DeviceMemory device_memory() const override {
    std::lock_guard lock(mu);
    asked_on = std::this_thread::get_id();
    return scripted;
  }

  mutable std::mutex mu;
  backend::DeviceMemory scripted{"gpu:0 test", 1000000, 600000, 300000, 50000};
  mutable std::thread::id asked_on;

 private:
  FakeModel fake_;
};

ModelConfig tiny_config() { return load_model_config(kTinyKjv.string()); }

EngineOptions options() {
  EngineOptions o;
  o.kv_cache_mib = 64;
  o.scheduler.max_seqs = 8;
  return o;
}

TEST(MemoryStats, PoolAndStateFromTheLayoutDeviceFromTheBackend) {
  DeviceModel m(tiny_config());
  const KvLayout layout = kv_layout(m.config(), 256, KvFormat{});
  const MemoryStats s = memory_stats(m, layout, 37, 8);
  EXPECT_EQ(s.device, "gpu:0 test");
  EXPECT_EQ(s.kv_pool, 37 * layout.bytes_per_block);
  EXPECT_EQ(s.sequence_state, 8 * layout.state_bytes_per_seq);
  EXPECT_GT(layout.bytes_per_block, 0);
  EXPECT_EQ(s.weights, 300000);  // the device's, not the checkpoint's 5000
  EXPECT_EQ(s.workspace, 50000);
  EXPECT_EQ(s.device_total, 1000000);
  EXPECT_EQ(s.device_free, 600000);
  EXPECT_GT(s.host_rss, 1 << 20);
}

TEST(MemoryStats, WeightsFallBackToTheCheckpointWhenTheBackendDoesNotKnow) {
  DeviceModel m(tiny_config());
  m.scripted = backend::host_memory_report();
  const MemoryStats s = memory_stats(m, kv_layout(m.config(), 256, KvFormat{}), 1, 1);
  EXPECT_EQ(s.device, "host");
  EXPECT_EQ(s.weights, 5000);
  EXPECT_EQ(s.workspace, -1);
  EXPECT_GT(s.device_total, 0);
  EXPECT_GT(s.device_free, 0);
}

TEST(MemoryStats, TheStartupTableHasTheDeviceRows) {
  DeviceModel m(tiny_config());
  const std::string gpu = engine_memory_table(m, options());
  for (const char* row : {"memory: KV pool", "memory: device ", "600.00 KB  free of 1.00 MB (gpu:0 test)",
                          "memory: device weights ", "300.00 KB  uploaded so far", "memory: device workspace ",
                          "50.00 KB  tensors live", "memory: host resident "})
    EXPECT_NE(gpu.find(row), std::string::npos) << "missing '" << row << "' in:\n" << gpu;
  m.scripted = backend::host_memory_report();
  const std::string cpu = engine_memory_table(m, options());
  EXPECT_NE(cpu.find("(host)"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("weights stay in the mapped checkpoint"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("device weights"), std::string::npos) << cpu;
}

TEST(MemoryStats, TheEngineRefreshesThemOnItsThread) {
  auto owned = std::make_unique<DeviceModel>(tiny_config());
  DeviceModel* m = owned.get();
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(kTinyKjv.string()));
  auto engine = start_engine(std::move(owned), tokenizer, options());
  const EngineStats first = engine->stats();
  EXPECT_EQ(first.memory.weights, 300000);
  EXPECT_EQ(first.memory.kv_pool,
            first.kv_blocks_total * kv_layout(m->config(), 256, KvFormat{}).bytes_per_block);
  {
    std::lock_guard lock(m->mu);
    m->scripted.weights = 310000;
    m->scripted.free = 590000;
  }
  // The engine asks at most once a second; a request finishing after that second publishes.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  std::promise<std::thread::id> event_thread;
  Request r;
  r.prompt = {11, 12, 13};
  r.max_tokens = 2;
  r.sampling.greedy = true;
  engine->submit(r, [&](const Event& e) {
    if (e.final) event_thread.set_value(std::this_thread::get_id());
  });
  const std::thread::id engine_thread = event_thread.get_future().get();
  const EngineStats later = engine->stats();
  EXPECT_EQ(later.memory.weights, 310000);
  EXPECT_EQ(later.memory.device_free, 590000);
  engine->shutdown();
  EXPECT_EQ(m->asked_on, engine_thread);
}

}  // namespace
}  // namespace plumb::runtime
