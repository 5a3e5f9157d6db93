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

// Logits of the rows a pattern asks for, concatenated over its forwards. `chunk` tokens per
// forward of each of `seqs` sequences (stepping together), logits of every sequence's last row.
std::vector<float> run_pattern(Model& m, int64_t tokens, int64_t chunk, int64_t seqs) {
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::unique_ptr<SequenceState>> states;
  for (int64_t s = 0; s < seqs; ++s) ids.push_back(prompt(tokens + 7 * s, m.config().vocab_size, s)), states.push_back(m.new_sequence());
  std::vector<float> out;
  std::vector<int64_t> done(static_cast<std::size_t>(seqs), 0);
  for (bool more = true; more;) {
    std::vector<SequenceStep> batch;
    for (int64_t s = 0; s < seqs; ++s) {
      const auto& v = ids[static_cast<std::size_t>(s)];
      const int64_t at = done[static_cast<std::size_t>(s)], n = std::min<int64_t>(chunk, static_cast<int64_t>(v.size()) - at);
      if (n <= 0) continue;
      batch.push_back({states[static_cast<std::size_t>(s)].get(), std::span<const TokenId>(v.data() + at, static_cast<std::size_t>(n))});
      done[static_cast<std::size_t>(s)] += n;
    }
    more = !batch.empty();
    if (!more) break;
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
    const std::vector<float> want = run_pattern(*cpu_, tokens, chunk, seqs), got = run_pattern(*gpu_, tokens, chunk, seqs);
    ASSERT_EQ(got.size(), want.size());
    std::size_t differ = 0, first = 0;
    float worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        if (differ++ == 0) first = i;
        worst = std::max(worst, std::abs(got[i] - want[i]));
      }
    EXPECT_EQ(differ, 0u) << numerics_name(GetParam()) << ", " << tokens << " tokens in chunks of " << chunk << ", " << seqs
                          << " sequence(s): " << differ << " of " << got.size() << " logits differ from the CPU (first at "
                          << first << ", max abs diff " << worst << ")";
  }
  std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(GpuCpuOrderShapes, WholePromptLastRow) { expect_bitwise(97, 1000, 1); }
TEST_P(GpuCpuOrderShapes, ChunksOfSeven) { expect_bitwise(97, 7, 1); }
TEST_P(GpuCpuOrderShapes, OneTokenSteps) { expect_bitwise(40, 1, 1); }
TEST_P(GpuCpuOrderShapes, TwoSequencesInOneBatch) { expect_bitwise(60, 13, 2); }

INSTANTIATE_TEST_SUITE_P(Numerics, GpuCpuOrderShapes, ::testing::Values(Numerics::Reference, Numerics::Faithful),
                         [](const auto& p) { return std::string(numerics_name(p.param)); });

}  // namespace
}  // namespace plumb
