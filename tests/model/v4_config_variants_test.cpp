// Issue 13 item 4: configs the release and HF load run here too: an indexer without a nope part
// (index_head_dim == qk_rope_head_dim) and a compress_ratios list longer than num_hidden_layers +
// num_nextn_predict_layers (read by prefix). The long list must give exactly the model of the
// exact-length list.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "../format/safetensors_corpus.h"
#include "plumb/model/model.h"
#include "plumb/model/synth_v4.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

fs::path synth(const fs::path& dir, const nlohmann::json& cfg) {
  fs::create_directories(dir);
  const fs::path cfg_path = dir / "source-config.json";
  std::ofstream(cfg_path) << cfg.dump(2);
  v4::SynthOptions o;
  o.config_path = cfg_path.string();
  o.out_dir = (dir / "ckpt").string();
  o.seed = 13;
  o.with_mtp = false;
  v4::synthesize_checkpoint(o);
  return o.out_dir;
}

TEST(V4ConfigVariants, IndexerWithoutNopeAndALongerRatioListRun) {
  std::ifstream in(std::string(PLUMB_SOURCE_DIR) + "/tools/tiny-v4/config.json");
  nlohmann::json base = nlohmann::json::parse(in);
  base["index_head_dim"] = base["qk_rope_head_dim"];  // 16: the indexer head is all RoPE
  base["num_nextn_predict_layers"] = 0;
  base["compress_ratios"] = {0, 4, 16, 4};
  nlohmann::json longer = base;
  longer["compress_ratios"] = {0, 4, 16, 4, 0, 128};  // trailing entries of a deeper model
  TempDir tmp;
  const fs::path a = synth(tmp.path() / "exact", base), b = synth(tmp.path() / "longer", longer);

  std::vector<TokenId> ids(40);
  std::iota(ids.begin(), ids.end(), 7);  // 40 tokens: 10 CSA entries for index_topk 4
  for (Numerics n : {Numerics::Reference, Numerics::Faithful}) {
    auto ma = load_model(a.string(), {"cpu", 2, n});
    auto mb = load_model(b.string(), {"cpu", 2, n});
    EXPECT_EQ(mb->config().compress_ratios, (std::vector<int64_t>{0, 4, 16, 4}));
    EXPECT_EQ(mb->config().warnings.size(), 1u);
    const std::vector<float> la = ma->prompt_logits(ids), lb = mb->prompt_logits(ids);
    ASSERT_EQ(la.size(), ids.size() * static_cast<std::size_t>(ma->config().vocab_size));
    for (float v : la) ASSERT_TRUE(std::isfinite(v)) << numerics_name(n);
    EXPECT_EQ(la, lb) << numerics_name(n) << ": the longer list changed the model";
  }
}

}  // namespace
}  // namespace plumb
