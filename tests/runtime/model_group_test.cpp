// runtime/model_group: the engine on a lead model, and a follower on another thread, connected
// by an in-process two-rank communicator (no MPI, so the sanitized builds run it). Both sides
// wrap a FakeModel in a recorder: the follower must see exactly the lead's model calls (the KV
// layout, sequences made and forked, every forward's chunks: tokens, block tables, which logits),
// in order, and end when the lead's model ends; the tokens are those of an engine without a group.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fake_engine_model.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/local_engine.h"
#include "plumb/runtime/model_group.h"

namespace plumb::runtime {
namespace {

using testing::FakeModel;
using testing::greedy_ignoring_eos;
using testing::kTinyKjv;

// Rank 0's broadcasts, queued for rank 1: all the protocol uses.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<std::uint8_t>> messages;
};

class PairCommunicator final : public dist::Communicator {
 public:
  PairCommunicator(std::shared_ptr<Channel> ch, int rank) : ch_(std::move(ch)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string transport() const override { return "test pair"; }
  void barrier() override {}
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (root != 0) fail("pair: broadcasts come from rank 0");
    auto* p = static_cast<std::uint8_t*>(data);
    std::unique_lock lk(ch_->mu);
    if (rank_ == 0) {
      ch_->messages.emplace_back(p, p + bytes);
      ch_->cv.notify_one();
      return;
    }
    ch_->cv.wait(lk, [&] { return !ch_->messages.empty(); });
    const std::vector<std::uint8_t> m = std::move(ch_->messages.front());
    ch_->messages.pop_front();
    if (m.size() != bytes) fail("pair: a broadcast of {} bytes where {} were expected", m.size(), bytes);
    if (bytes > 0) std::memcpy(p, m.data(), bytes);
  }
  void all_gather_bytes(const void*, std::span<const int64_t>, void*) override { fail("pair: not used"); }
  void all_to_all_bytes(const void*, std::span<const int64_t>, void*, std::span<const int64_t>) override {
    fail("pair: not used");
  }
  std::unique_ptr<dist::Communicator> split(int, int) override { fail("pair: not used"); }
  [[noreturn]] void abort(int code) override {
    ADD_FAILURE() << "a model call failed: the group was aborted";
    std::_Exit(code);
  }

 private:
  std::shared_ptr<Channel> ch_;
  int rank_;
};

// The calls a model gets, as text (sequences named in the order this model made them).
class RecordingModel final : public EngineModel {
 public:
  // `log` outlives the model (an engine owns and destroys its model).
  RecordingModel(const ModelConfig& cfg, std::shared_ptr<std::vector<std::string>> log) : log_(std::move(log)), fake_(cfg) {}
  struct Seq final : Sequence {
    Seq(int n, std::unique_ptr<Sequence> s) : name(n), inner(std::move(s)) {}
    int name;
    std::unique_ptr<Sequence> inner;
  };
  std::unique_ptr<Sequence> new_sequence() override {
    log_->push_back(fmt::format("new {}", made_));
    return std::make_unique<Seq>(made_++, fake_.new_sequence());
  }
  void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat& f) override {
    log_->push_back(fmt::format("kv {} {} {} {} {}", block_size, blocks, static_cast<int>(f.kv), static_cast<int>(f.index_keys),
                              f.bf16_recent));
    fake_.use_kv_blocks(block_size, blocks, f);
  }
  std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from, std::span<const std::int32_t> to) override {
    const auto& s = static_cast<const Seq&>(seq);
    log_->push_back(fmt::format("fork {} -> {} from {} to {}", s.name, made_, from, to));
    return std::make_unique<Seq>(made_++, fake_.fork(*s.inner, from, to));
  }
  std::vector<float> forward(std::span<const Chunk> batch) override {
    std::vector<Chunk> inner(batch.begin(), batch.end());
    std::string line = "forward";
    for (Chunk& c : inner) {
      const auto& s = *static_cast<Seq*>(c.seq);
      line += fmt::format(" | seq {} tokens {} blocks {} all {} last {}", s.name, c.tokens, c.blocks, c.all_logits, c.last_logits);
      c.seq = s.inner.get();
    }
    log_->push_back(line);
    return fake_.forward(inner);
  }
  const ModelConfig& config() const override { return fake_.config(); }
  std::int64_t weight_bytes() const override { return 0; }

 private:
  std::shared_ptr<std::vector<std::string>> log_;
  FakeModel fake_;
  int made_ = 0;
};

// Requests at once, one cancelled, two sharing a 2-block prefix (a fork from the prefix cache).
std::vector<std::vector<std::uint32_t>> run(std::unique_ptr<EngineModel> model) {
  EngineOptions o;
  o.kv_block_size = 128;
  o.kv_blocks = 64;
  o.scheduler.max_batch_tokens = 96;
  auto engine = start_engine(std::move(model), nullptr, o);
  std::vector<std::uint32_t> shared(300);
  for (std::size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<std::uint32_t>(7 + i % 97);
  std::vector<std::vector<std::uint32_t>> out;
  out.push_back(generate_one(*engine, greedy_ignoring_eos(shared, 5)).tokens);  // its snapshots are forked below
  std::vector<std::thread> clients;
  std::vector<std::vector<std::uint32_t>> together(3);
  auto longer = shared;
  longer.push_back(11);
  clients.emplace_back([&] { together[0] = generate_one(*engine, greedy_ignoring_eos(longer, 6)).tokens; });
  clients.emplace_back([&] { together[1] = generate_one(*engine, greedy_ignoring_eos({3, 1, 4, 1, 5, 9, 2, 6}, 9)).tokens; });
  clients.emplace_back([&] { together[2] = generate_one(*engine, greedy_ignoring_eos({2, 7, 1, 8}, 4)).tokens; });
  for (auto& c : clients) c.join();
  const RequestId gone = engine->submit(greedy_ignoring_eos({5, 5, 5}, 200), [](const Event&) {});
  engine->cancel(gone);
  engine->shutdown();
  out.insert(out.end(), together.begin(), together.end());
  return out;
}

TEST(ModelGroup, TheFollowerMakesTheLeadsCallsInOrderAndEndsWithIt) {
  const ModelConfig cfg = load_model_config(kTinyKjv.string());
  const auto alone = run(std::make_unique<RecordingModel>(cfg, std::make_shared<std::vector<std::string>>()));

  auto ch = std::make_shared<Channel>();
  PairCommunicator lead_comm(ch, 0), follow_comm(ch, 1);
  auto lead_log = std::make_shared<std::vector<std::string>>(), follow_log = std::make_shared<std::vector<std::string>>();
  RecordingModel follower(cfg, follow_log);
  std::thread follow([&] { follow_model_group(follower, follow_comm); });
  const auto grouped = run(lead_model_group(std::make_unique<RecordingModel>(cfg, lead_log), lead_comm));
  follow.join();  // returns once the lead's model has ended (with its engine, inside run)
  EXPECT_EQ(grouped, alone) << "the tokens of a group's engine are one model's";
  ASSERT_FALSE(follow_log->empty());
  EXPECT_EQ(follow_log->size(), lead_log->size());
  for (std::size_t i = 0; i < std::min(follow_log->size(), lead_log->size()); ++i)
    ASSERT_EQ((*follow_log)[i], (*lead_log)[i]) << "call " << i;
  bool forked = false;
  for (const std::string& l : *lead_log) forked = forked || l.rfind("fork", 0) == 0;
  EXPECT_TRUE(forked) << "the workload did not fork a sequence from the prefix cache";
}

}  // namespace
}  // namespace plumb::runtime
