// Paged KV storage (model/kv_pool.h) against the dense layout it replaced: the same tokens give
// bitwise the same logits whether each sequence's caches sit in one block (a block longer than
// the sequence: entry w at pool row w, as the dense per-sequence caches had it) or are scattered
// over blocks of 128/256/512 positions at random, non-contiguous ids; on V4 (tiny-kjv: CSA and
// HCA layers, compressed entries and indexer keys) and V3 (tiny-a: MLA latents and rope keys),
// with two sequences batched through chunked prefill and decode. The private allocator (plumb run
// / generate, no engine) gives the same logits and reuses the blocks of a destroyed sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plumb/model/model.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

const std::string kV4 = std::string(PLUMB_SOURCE_DIR) + "/models/tiny-kjv";
const std::string kV3 = std::string(PLUMB_TEST_DATA) + "/golden/v3/tiny-a";
const LoadOptions kCpu{"cpu", 2, Numerics::Reference};

constexpr int64_t kPrompt[2] = {300, 170}, kChunk[2] = {97, 61}, kDecode = 6;

std::vector<TokenId> tokens(uint64_t seed, int64_t n, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> d(2, static_cast<TokenId>(vocab - 1));
  std::vector<TokenId> t(static_cast<std::size_t>(n));
  for (TokenId& x : t) x = d(rng);
  return t;
}

// Block ids of sequence s (its final length given); empty function: the model allocates.
using Assign = std::function<std::vector<int32_t>(int s, int64_t length)>;

// Two sequences fed together: prompt chunks of 97 and 61 tokens, then kDecode single-token steps
// (the sampled token replaced by a fixed one: the test is about storage, not sampling). Returns
// the logits of every row of every step.
std::vector<float> run(Model& m, const Assign& assign) {
  const int64_t V = m.config().vocab_size;
  std::unique_ptr<SequenceState> seqs[2] = {m.new_sequence(), m.new_sequence()};
  std::vector<TokenId> toks[2];
  for (int s = 0; s < 2; ++s) {
    toks[s] = tokens(11 + s, kPrompt[s] + kDecode, V);
    if (assign) seqs[s]->blocks.ids = assign(s, kPrompt[s] + kDecode);
  }
  std::vector<float> out;
  for (;;) {
    std::vector<SequenceStep> batch;
    for (int s = 0; s < 2; ++s) {
      const int64_t pos = seqs[s]->pos, end = static_cast<int64_t>(toks[s].size());
      if (pos == end) continue;
      const int64_t n = pos < kPrompt[s] ? std::min(kChunk[s], kPrompt[s] - pos) : 1;
      batch.push_back({seqs[s].get(), std::span(toks[s]).subspan(static_cast<std::size_t>(pos), static_cast<std::size_t>(n))});
    }
    if (batch.empty()) return out;
    const std::vector<float> l = to_host_floats(m.backend(), m.forward(batch, all_rows(batch)));
    out.insert(out.end(), l.begin(), l.end());
  }
}

// Each sequence in one block of `block` positions: the dense layout.
Assign one_block_each() {
  return [](int s, int64_t) { return std::vector<int32_t>{s}; };
}

// Distinct ids from a shuffled pool of `blocks`, ceil(length / block) per sequence.
Assign scattered(int64_t block, int64_t blocks, uint64_t seed) {
  auto ids = std::make_shared<std::vector<int32_t>>(static_cast<std::size_t>(blocks));
  std::iota(ids->begin(), ids->end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids->begin(), ids->end(), rng);
  auto next = std::make_shared<std::size_t>(0);
  return [=](int, int64_t length) {
    const auto n = static_cast<std::size_t>((length + block - 1) / block);
    std::vector<int32_t> t(ids->begin() + static_cast<std::ptrdiff_t>(*next),
                           ids->begin() + static_cast<std::ptrdiff_t>(*next + n));
    *next += n;
    return t;
  };
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end()) << what << ": first difference at logit " << (diff.first - got.begin());
}

class PagedKv : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedKv, ScatteredBlocksGiveTheDenseLayoutsLogitsBitwise) {
  const std::unique_ptr<Model> m = load_model(GetParam(), kCpu);
  const std::vector<float> private_alloc = run(*m, {});  // plumb run / generate: the model's own ids
  m->use_external_blocks(4096, 2);
  const std::vector<float> dense = run(*m, one_block_each());
  ASSERT_FALSE(dense.empty());
  expect_bitwise(private_alloc, dense, "private allocator");
  for (const int64_t block : {128, 256, 512}) {
    m->use_external_blocks(block, 64);
    expect_bitwise(run(*m, scattered(block, 64, 1000 + static_cast<uint64_t>(block))), dense,
                   "blocks of " + std::to_string(block));
  }
}

TEST_P(PagedKv, PrivateAllocatorReusesTheBlocksOfADestroyedSequence) {
  const std::unique_ptr<Model> m = load_model(GetParam(), kCpu);
  const std::vector<TokenId> t = tokens(5, 300, m->config().vocab_size);
  auto feed = [&](SequenceState& s) {
    const SequenceStep step{&s, t};
    m->forward({&step, 1}, {});
  };
  std::unique_ptr<SequenceState> keep = m->new_sequence(), first = m->new_sequence();
  feed(*keep);
  feed(*first);
  const std::vector<int32_t> freed = first->blocks.ids;
  ASSERT_FALSE(freed.empty());
  first.reset();
  const std::unique_ptr<SequenceState> second = m->new_sequence();
  feed(*second);
  EXPECT_EQ(second->blocks.ids, freed);
  for (int32_t id : keep->blocks.ids)
    EXPECT_EQ(std::count(second->blocks.ids.begin(), second->blocks.ids.end(), id), 0) << "block " << id << " shared";
}

TEST_P(PagedKv, EngineTablesThatDoNotCoverTheStepAreRefused) {
  const std::unique_ptr<Model> m = load_model(GetParam(), kCpu);
  m->use_external_blocks(128, 4);
  const std::vector<TokenId> t = tokens(6, 130, m->config().vocab_size);
  auto forward = [&](std::vector<int32_t> ids) {
    const std::unique_ptr<SequenceState> s = m->new_sequence();
    s->blocks.ids = std::move(ids);
    const SequenceStep step{s.get(), t};
    m->forward({&step, 1}, {});
  };
  auto message = [&](std::vector<int32_t> ids) -> std::string {
    try {
      forward(std::move(ids));
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(message({3}), "forward: sequence 0's block table has 1 blocks of 128 positions; this step reaches position 129");
  EXPECT_EQ(message({1, 4}), "forward: block 1 of sequence 0's table is 4, outside the KV pool of 4 blocks");
  EXPECT_NO_THROW(forward({3, 0}));
}

INSTANTIATE_TEST_SUITE_P(Models, PagedKv, ::testing::Values(kV4, kV3),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.index == 0 ? "V4" : "V3"; });

}  // namespace
}  // namespace plumb
