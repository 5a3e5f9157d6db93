// The GPU in the CPU's order must be bitwise the CPU for every way the serving engine feeds a
// sequence, not only for one whole-prompt forward (gpu_determinism_test.cpp): the last row's
// logits only, prefill in chunks, 1-token decode steps, and two sequences in one batch. Found
// by EngineBatchingGpu (faithful numerics differed from the CPU in the engine while whole-prompt
// verify was bitwise): one test per feeding pattern, so a failure names the pattern.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/model/model.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

std::vector<TokenId> prompt(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<TokenId> ids(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>((i * 7919 + 11 + salt * 104729) % vocab);
  return ids;
}

// How one sequence is fed: it joins the batch at step `join`, its first forward takes `first`
// tokens, every later one `chunk` (1: decode steps).
struct Feed {
  int64_t join = 0, first = 0, chunk = 0;
};

// Logits of every sequence's last row per forward, concatenated: `tokens` (+ 7 per sequence)
// tokens of each sequence, fed as `feeds` say.
std::vector<float> run_feeds(Model& m, int64_t tokens, const std::vector<Feed>& feeds) {
  const int64_t seqs = static_cast<int64_t>(feeds.size());
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::unique_ptr<SequenceState>> states;
  for (int64_t s = 0; s < seqs; ++s) ids.push_back(prompt(tokens + 7 * s, m.config().vocab_size, s)), states.push_back(m.new_sequence());
  std::vector<float> out;
  std::vector<int64_t> done(static_cast<std::size_t>(seqs), 0);
  for (int64_t step = 0, more = 1; more; ++step) {
    std::vector<SequenceStep> batch;
    more = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      const auto& v = ids[static_cast<std::size_t>(s)];
      const Feed& f = feeds[static_cast<std::size_t>(s)];
      const int64_t at = done[static_cast<std::size_t>(s)], left = static_cast<int64_t>(v.size()) - at;
      more |= left > 0;
      if (step < f.join) continue;
      const int64_t n = std::min<int64_t>(at == 0 ? f.first : f.chunk, left);
      if (n <= 0) continue;
      batch.push_back({states[static_cast<std::size_t>(s)].get(), std::span<const TokenId>(v.data() + at, static_cast<std::size_t>(n))});
      done[static_cast<std::size_t>(s)] += n;
    }
    if (batch.empty()) continue;
    const std::vector<float> l = to_host_floats(m.backend(), m.forward(batch, last_rows(batch)));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

class GpuCpuOrderShapes : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    if (backend::gpu_backend_name().empty()) GTEST_SKIP() << "plumb was built without a GPU backend";
    if (const std::string why = backend::gpu_unavailable_reason(); !why.empty()) GTEST_SKIP() << "no usable GPU: " << why;
    ::setenv("PLUMB_GPU_ORDER", "cpu", 1);  // read when a GPU backend is made
    const std::string dir = (fs::path(PLUMB_TEST_DATA).parent_path().parent_path() / "models" / "tiny-kjv").string();
    cpu_ = load_model(dir, {"cpu", 2, GetParam()});
    gpu_ = load_model(dir, {backend::gpu_backend_name(), 0, GetParam()});
    ::unsetenv("PLUMB_GPU_ORDER");
  }
  void expect_bitwise(int64_t tokens, int64_t chunk, int64_t seqs) {
    expect_bitwise_feeds(tokens, std::vector<Feed>(static_cast<std::size_t>(seqs), Feed{0, chunk, chunk}),
                         std::to_string(tokens) + " tokens in chunks of " + std::to_string(chunk) + ", " +
                             std::to_string(seqs) + " sequence(s)");
  }
  void expect_bitwise_feeds(int64_t tokens, const std::vector<Feed>& feeds, const std::string& what) {
    const std::vector<float> want = run_feeds(*cpu_, tokens, feeds), got = run_feeds(*gpu_, tokens, feeds);
    ASSERT_EQ(got.size(), want.size());
    std::size_t differ = 0, first = 0;
    float worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        if (differ++ == 0) first = i;
        worst = std::max(worst, std::abs(got[i] - want[i]));
      }
    EXPECT_EQ(differ, 0u) << numerics_name(GetParam()) << ", " << what << ": " << differ << " of " << got.size() << " logits differ from the CPU (first at "
                          << first << ", max abs diff " << worst << ")";
  }
  std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(GpuCpuOrderShapes, WholePromptLastRow) { expect_bitwise(97, 1000, 1); }
TEST_P(GpuCpuOrderShapes, ChunksOfSeven) { expect_bitwise(97, 7, 1); }
TEST_P(GpuCpuOrderShapes, OneTokenSteps) { expect_bitwise(40, 1, 1); }
TEST_P(GpuCpuOrderShapes, TwoSequencesInOneBatch) { expect_bitwise(60, 13, 2); }
// What the engine's steps look like under a small token budget: one sequence decoding while
// others join and prefill in chunks (EngineBatchingGpu's faithful failure had such steps).
TEST_P(GpuCpuOrderShapes, DecodesBesidePrefillChunks) {
  expect_bitwise_feeds(50, {{0, 30, 1}, {5, 6, 6}, {9, 17, 1}}, "one decoding, one prefilling by 6, one joining later");
}

INSTANTIATE_TEST_SUITE_P(Numerics, GpuCpuOrderShapes, ::testing::Values(Numerics::Reference, Numerics::Faithful),
                         [](const auto& p) { return std::string(numerics_name(p.param)); });

}  // namespace
}  // namespace plumb
