// faithful V4 lays out each query's sparse-attention index row as the release does, with a window
// part min(P, W) wide inside a P-token prefill and W wide in a decode step (backend/index_row.h),
// and tiny-kjv's window (64) equals the release's softmax block, so the layout changes results.
// Given the prompt length (SequenceStep::prefill), a prompt fed in chunks gives the rows of its
// one-call prefill bitwise, as the serving engine needs (issue 15 item 6: under a 7-token budget
// its batched requests differed from the same requests alone). Without it each chunk after the
// first is laid out as decode steps and the rows move.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plumb/model/model.h"

namespace plumb {
namespace {

const std::string kTinyKjv = std::string(PLUMB_SOURCE_DIR) + "/models/tiny-kjv";

std::vector<TokenId> prompt(std::uint64_t seed, std::int64_t n, std::int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> p;
  for (std::int64_t i = 0; i < n; ++i) p.push_back(static_cast<TokenId>(2 + rng() % static_cast<std::uint64_t>(vocab - 2)));
  return p;
}

// Every row's logits, the prompt fed `chunk` tokens a call, each call given `prefill`.
std::vector<float> chunked(Model& m, const std::vector<TokenId>& ids, std::int64_t chunk, std::int64_t prefill) {
  const std::unique_ptr<SequenceState> s = m.new_sequence();
  std::vector<float> out;
  for (std::size_t at = 0; at < ids.size(); at += static_cast<std::size_t>(chunk)) {
    const std::size_t n = std::min(ids.size() - at, static_cast<std::size_t>(chunk));
    const SequenceStep step{s.get(), std::span<const TokenId>(ids).subspan(at, n), prefill};
    const std::vector<float> l = to_host_floats(m.backend(), m.forward({&step, 1}, all_rows({&step, 1})));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(V4PrefillLayout, FaithfulChunksGivenThePromptLengthAreOnePrefill) {
  const std::unique_ptr<Model> m = load_model(kTinyKjv, {"cpu", 2, Numerics::Faithful});
  bool moved = false;  // whether the layout mattered for some prompt (else this test shows nothing)
  for (const std::int64_t P : {30, 100, 147}) {
    const std::vector<TokenId> ids = prompt(static_cast<std::uint64_t>(P), P, m->config().vocab_size);
    const std::vector<float> whole = m->prompt_logits(ids);
    EXPECT_TRUE(bitwise_equal(chunked(*m, ids, 7, P), whole)) << P << " tokens in chunks of 7, given the prompt length";
    moved |= !bitwise_equal(chunked(*m, ids, 7, 0), whole);
  }
  EXPECT_TRUE(moved) << "chunks laid out as decode steps gave the one-call prefill's rows for every prompt";
}

}  // namespace
}  // namespace plumb
