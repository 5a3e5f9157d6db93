#pragma once
// An EngineModel with scripted logits for the engine's tests: every row's logits are a fixed
// pseudo-random function of the sequence's whole token history up to that row, so any mistake in
// what the engine feeds (a lost, repeated or misplaced token, a state not reset after preemption,
// rows returned in the wrong order) changes the logits. A prompt that starts with kPoison gets
// NaN logits (a per-request failure). The config is tiny-kjv's, for the KV layout.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <thread>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/runtime/engine_model.h"
#include "plumb/util/error.h"

namespace plumb::runtime::testing {

inline const std::filesystem::path kTinyKjv = std::filesystem::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";
constexpr std::uint32_t kPoison = 4321;

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The history hash after feeding `token` to a history with hash `h`.
inline std::uint64_t extend(std::uint64_t h, std::uint32_t token) { return mix(h * 31 + token + 1); }

// Logits for a history hash: values in [-4, 4) with a few clear favourites.
inline std::vector<float> fake_logits(std::uint64_t h, std::size_t vocab, bool poisoned) {
  std::vector<float> l(vocab);
  for (std::size_t v = 0; v < vocab; ++v)
    l[v] = poisoned ? std::numeric_limits<float>::quiet_NaN()
                    : static_cast<float>(static_cast<double>(mix(h ^ (v * 0x51ed27ull)) >> 40) / (1 << 24) * 8.0 - 4.0);
  return l;
}

class FakeModel final : public EngineModel {
 public:
  explicit FakeModel(ModelConfig cfg) : cfg_(std::move(cfg)) {}

  struct Seq final : Sequence {
    std::uint64_t hash = 0;
    std::int64_t pos = 0;
    bool poisoned = false;
  };

  std::unique_ptr<Sequence> new_sequence() override { return std::make_unique<Seq>(); }
  void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat&) override {
    block_size_ = block_size;
    blocks_ = blocks;
  }
  std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from_blocks,
                                 std::span<const std::int32_t> to_blocks) override {
    const auto& s = static_cast<const Seq&>(seq);
    // Whole blocks of the positions fed so far, into as many blocks.
    if (from_blocks.size() != to_blocks.size() || from_blocks.empty() ||
        static_cast<std::int64_t>(from_blocks.size()) * kForkBlock > s.pos)
      bad_forks++;
    ++forks;
    return std::make_unique<Seq>(s);
  }

  std::vector<float> forward(std::span<const Chunk> batch) override {
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a test holds the step
    std::vector<float> out;
    ++steps;
    check_tables(batch);
    for (const Chunk& c : batch) {
      auto& s = *static_cast<Seq*>(c.seq);
      rows_fed += static_cast<std::int64_t>(c.tokens.size());
      max_batch_seqs = std::max<std::int64_t>(max_batch_seqs, static_cast<std::int64_t>(batch.size()));
      for (std::size_t i = 0; i < c.tokens.size(); ++i) {
        if (s.pos == 0 && c.tokens[i] == kPoison) s.poisoned = true;
        s.hash = extend(s.hash, c.tokens[i]);
        ++s.pos;
        if (c.all_logits || (c.last_logits && i + 1 == c.tokens.size())) {
          const std::vector<float> l = fake_logits(s.hash, static_cast<std::size_t>(cfg_.vocab_size), s.poisoned);
          out.insert(out.end(), l.begin(), l.end());
        }
      }
    }
    return out;
  }

  const ModelConfig& config() const override { return cfg_; }
  std::int64_t weight_bytes() const override { return 0; }

  // While true, forward() waits (a step that takes as long as the test wants).
  std::atomic<bool> hold{false};
  // Read by tests after the engine is shut down (written on the engine thread).
  std::int64_t steps = 0, rows_fed = 0, max_batch_seqs = 0, forks = 0, bad_forks = 0;
  static constexpr std::int64_t kForkBlock = 128;  // the block size the prefix-cache tests use

 private:
  // What a paged model needs of the engine's tables: each chunk's covers its positions with ids
  // inside the pool, and no block is in two tables of a step.
  void check_tables(std::span<const Chunk> batch) const {
    std::vector<bool> used(static_cast<std::size_t>(blocks_));
    for (const Chunk& c : batch) {
      const std::int64_t end = static_cast<Seq*>(c.seq)->pos + static_cast<std::int64_t>(c.tokens.size());
      if (block_size_ < 1 || static_cast<std::int64_t>(c.blocks.size()) * block_size_ < end)
        fail("fake model: a block table of {} blocks of {} for {} positions", c.blocks.size(), block_size_, end);
      for (std::int32_t id : c.blocks) {
        if (id < 0 || id >= blocks_ || used[static_cast<std::size_t>(id)])
          fail("fake model: block {} is outside the pool of {} or in two tables", id, blocks_);
        used[static_cast<std::size_t>(id)] = true;
      }
    }
  }

  ModelConfig cfg_;
  std::int64_t block_size_ = 0, blocks_ = 0;
};

// A greedy request for n tokens that ignores EOS (so it generates exactly n).
inline Request greedy_ignoring_eos(std::vector<TokenId> prompt, std::int64_t n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.greedy = true;
  r.ignore_eos = true;
  return r;
}

// What greedy decoding of the fake gives for `prompt`, computed without the engine.
inline std::vector<std::uint32_t> fake_greedy(std::span<const std::uint32_t> prompt, std::size_t n, std::size_t vocab,
                                              std::uint32_t eos, bool stop_at_eos = true) {
  std::uint64_t h = 0;
  for (std::uint32_t t : prompt) h = extend(h, t);
  std::vector<std::uint32_t> out;
  while (out.size() < n) {
    const std::vector<float> l = fake_logits(h, vocab, false);
    std::uint32_t best = 0;
    for (std::uint32_t v = 1; v < vocab; ++v)
      if (l[v] > l[best]) best = v;
    out.push_back(best);
    if (stop_at_eos && best == eos) break;
    h = extend(h, best);
  }
  return out;
}

}  // namespace plumb::runtime::testing
