// The Model interface on both architectures: load_model picks the implementation from
// config.json; forward() returns logits only for the rows asked for, bitwise equal to the same
// rows of the all-rows forward (ragged batches, prefill and decode rows, no rows at all); bad rows
// and foreign states are clear errors; the cache spec matches the state the forward allocates.
#include "plumb/model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "plumb/model/model_v3.h"
#include "plumb/model/model_v4.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
const fs::path kV4 = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-v4";  // ratios 0/4/16/4/0, window 16
const fs::path kV3 = fs::path(PLUMB_TEST_DATA) / "golden" / "v3" / "tiny-a";

struct Case {
  const char* name;
  fs::path dir;
  Numerics numerics;
};

class ModelInterface : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!fs::exists(GetParam().dir / "config.json")) FAIL() << GetParam().dir << " is missing: it is a committed fixture";
    model_ = load_model(GetParam().dir.string(), {"cpu", 2, GetParam().numerics});
  }

  std::vector<TokenId> random_ids(std::mt19937_64& rng, int64_t n) const {
    std::uniform_int_distribution<TokenId> d(2, static_cast<TokenId>(model_->config().vocab_size - 1));
    std::vector<TokenId> v(static_cast<std::size_t>(n));
    for (TokenId& t : v) t = d(rng);
    return v;
  }

  // Runs `chunks[s]` of each sequence (fresh states) as successive ragged batches; each call
  // asks for the rows `pick` chooses. Returns every call's logits.
  using Pick = std::function<std::vector<int64_t>(std::span<const SequenceStep>)>;
  std::vector<std::vector<float>> run(const std::vector<std::vector<TokenId>>& prompts,
                                      const std::vector<std::vector<int64_t>>& chunks, const Pick& pick,
                                      std::vector<std::vector<int64_t>>* rows_asked = nullptr) {
    std::vector<std::unique_ptr<SequenceState>> states;
    for (std::size_t s = 0; s < prompts.size(); ++s) states.push_back(model_->new_sequence());
    std::vector<std::vector<float>> out;
    std::vector<std::size_t> fed(prompts.size(), 0);
    for (std::size_t c = 0; c < chunks[0].size(); ++c) {
      std::vector<SequenceStep> batch;
      for (std::size_t s = 0; s < prompts.size(); ++s) {
        const auto n = static_cast<std::size_t>(chunks[s][c]);
        batch.push_back({states[s].get(), std::span(prompts[s]).subspan(fed[s], n)});
        fed[s] += n;
      }
      const std::vector<int64_t> rows = pick(batch);
      if (rows_asked) rows_asked->push_back(rows);
      const backend::Tensor t = model_->forward(batch, rows);
      EXPECT_EQ(t.shape(), (backend::Shape{static_cast<int64_t>(rows.size()), model_->config().vocab_size}));
      out.push_back(to_host_floats(model_->backend(), t));
    }
    return out;
  }

  std::unique_ptr<Model> model_;
};

TEST_P(ModelInterface, LoadModelPicksTheArchitecture) {
  const Arch want = load_model_config(GetParam().dir.string()).arch;
  EXPECT_EQ(model_->config().arch, want);
  const std::unique_ptr<SequenceState> s = model_->new_sequence();
  EXPECT_EQ(s->pos, 0);
  if (want == Arch::DeepseekV4) {
    EXPECT_NE(dynamic_cast<v4::SequenceState*>(s.get()), nullptr);
  } else {
    EXPECT_NE(dynamic_cast<v3::SequenceState*>(s.get()), nullptr);
  }
  EXPECT_FALSE(model_->facts().empty());
}

TEST_P(ModelInterface, WantedRowsAreBitwiseTheRowsOfTheFullForward) {
  std::mt19937_64 rng(11);
  const auto V = static_cast<std::size_t>(model_->config().vocab_size);
  // Three sequences, four calls: prefill chunks of different lengths, then decode steps.
  const std::vector<std::vector<int64_t>> chunks = {{5, 17, 1, 1}, {1, 1, 1, 1}, {33, 2, 9, 1}};
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& c : chunks) prompts.push_back(random_ids(rng, std::accumulate(c.begin(), c.end(), int64_t{0})));
  const auto full = run(prompts, chunks, [](auto batch) { return all_rows(batch); });
  const std::vector<Pick> picks = {
      [](auto batch) { return last_rows(batch); },
      [&rng](auto batch) {  // a random ascending subset, at least one row
        std::vector<int64_t> r;
        const std::vector<int64_t> all = all_rows(batch);
        for (int64_t i : all)
          if (rng() % 3 == 0) r.push_back(i);
        if (r.empty()) r.push_back(all[rng() % all.size()]);
        return r;
      },
  };
  for (std::size_t p = 0; p < picks.size(); ++p) {
    std::vector<std::vector<int64_t>> asked;
    const auto got = run(prompts, chunks, picks[p], &asked);
    for (std::size_t c = 0; c < got.size(); ++c) {
      ASSERT_EQ(got[c].size(), asked[c].size() * V);
      for (std::size_t k = 0; k < asked[c].size(); ++k) {
        const std::size_t row = static_cast<std::size_t>(asked[c][k]);
        EXPECT_TRUE(std::equal(got[c].begin() + k * V, got[c].begin() + (k + 1) * V, full[c].begin() + row * V))
            << "pick " << p << ", call " << c << ", batch row " << row;
      }
    }
  }
}

TEST_P(ModelInterface, NoRowsGiveNoLogitsAndTheStateStillAdvances) {
  std::mt19937_64 rng(12);
  const std::vector<TokenId> ids = random_ids(rng, 9);
  const std::unique_ptr<SequenceState> a = model_->new_sequence(), b = model_->new_sequence();
  const SequenceStep first{a.get(), std::span(ids).first(8)};
  const backend::Tensor none = model_->forward({&first, 1}, {});
  EXPECT_EQ(none.shape(), (backend::Shape{0, model_->config().vocab_size}));
  EXPECT_EQ(a->pos, 8);
  // The next token's logits equal those of a sequence that got all its rows.
  const SequenceStep all_first{b.get(), std::span(ids).first(8)};
  model_->forward({&all_first, 1}, all_rows({&all_first, 1}));
  const SequenceStep next_a{a.get(), std::span(ids).subspan(8)}, next_b{b.get(), std::span(ids).subspan(8)};
  const std::vector<int64_t> row0 = {0};
  EXPECT_EQ(to_host_floats(model_->backend(), model_->forward({&next_a, 1}, row0)),
            to_host_floats(model_->backend(), model_->forward({&next_b, 1}, row0)));
}

TEST_P(ModelInterface, BadRowsAndForeignStatesAreClearErrors) {
  const std::vector<TokenId> ids = {3, 4, 5};
  auto expect_error = [&](std::vector<int64_t> rows, const std::string& part) {
    const std::unique_ptr<SequenceState> s = model_->new_sequence();
    const SequenceStep step{s.get(), ids};
    try {
      model_->forward({&step, 1}, rows);
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error({0, 3}, "logit row 3 is outside the batch's 3 rows");
  expect_error({-1}, "logit row -1 is outside");
  expect_error({2, 1}, "ascending and distinct, got 1 after 2");
  expect_error({1, 1}, "ascending and distinct, got 1 after 1");

  struct Foreign : SequenceState {};
  Foreign f;
  const SequenceStep step{&f, ids};
  EXPECT_THROW(model_->forward({&step, 1}, {}), Error);
  const std::vector<TokenId> oov = {static_cast<TokenId>(model_->config().vocab_size)};
  const std::unique_ptr<SequenceState> s = model_->new_sequence();
  const SequenceStep bad{s.get(), oov};
  EXPECT_THROW(model_->forward({&bad, 1}, {}), Error);
}

// Each layer's spec against the tensors the forward keeps after a prompt that closes entries: the
// fixed state in the sequence, the growing caches in the model's paged KV pool.
TEST_P(ModelInterface, CacheSpecDescribesTheSequenceState) {
  const CacheSpec& spec = model_->cache_spec();
  const ModelConfig& cfg = model_->config();
  ASSERT_EQ(static_cast<int64_t>(spec.layers.size()), cfg.num_hidden_layers);
  std::mt19937_64 rng(13);
  const std::vector<TokenId> ids = random_ids(rng, 40);
  const std::unique_ptr<SequenceState> s = model_->new_sequence();
  const SequenceStep step{s.get(), ids};
  model_->forward({&step, 1}, {});
  EXPECT_EQ(s->blocks.ids.size(), 1u);  // 40 positions: one block of the private allocator
  if (auto* v4s = dynamic_cast<v4::SequenceState*>(s.get())) {
    const KvPool& pool = dynamic_cast<v4::ModelV4&>(*model_).forward_pass().kv_pool();
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      const LayerCacheSpec& ls = spec.layers[l];
      const v4::LayerState& st = v4s->layers[l];
      const int64_t m = cfg.compress_ratio(l);
      EXPECT_EQ(ls.kind, m == 0 ? AttnType::SWA : m == 4 ? AttnType::CSA : AttnType::HCA) << l;
      EXPECT_EQ(ls.ratio, m) << l;
      EXPECT_EQ(st.window.shape(), (backend::Shape{ls.window, ls.window_row})) << l;
      int64_t fixed = 0;
      for (const backend::CompressorState* c : {&st.compressor, &st.index_compressor})
        if (c->kv.defined()) fixed += c->kv.numel() + c->score.numel();
      EXPECT_EQ(fixed, ls.fixed) << l;
      EXPECT_EQ(pool.entry_values(l), ls.entry) << l;
    }
  } else {
    ASSERT_NE(dynamic_cast<v3::SequenceState*>(s.get()), nullptr);
    const KvPool& pool = dynamic_cast<v3::ModelV3&>(*model_).forward_pass().kv_pool();
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      EXPECT_EQ(spec.layers[l].kind, AttnType::MLA);
      EXPECT_EQ(spec.layers[l].ratio, 1);
      EXPECT_EQ(spec.layers[l].entry, pool.entry_values(l)) << l;
    }
    EXPECT_EQ(spec.values_after(40), cfg.num_hidden_layers * 40 * (cfg.kv_lora_rank + cfg.qk_rope_head_dim));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelInterface,
                         ::testing::Values(Case{"V4Reference", kV4, Numerics::Reference},
                                           Case{"V4Faithful", kV4, Numerics::Faithful},
                                           Case{"V3Reference", kV3, Numerics::Reference},
                                           Case{"V3Faithful", kV3, Numerics::Faithful}),
                         [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace plumb
