// The `reference` profile against HF transformers goldens (tests/data/golden/v4/<config>/: fp32
// HF logits of several prompts and greedy continuations, for the random fixtures of
// tools/golden/make_v4_fixtures.py and for trained models whose meta.json names the
// checkpoint). Every prompt: max|diff| / max|ref| <= 1e-4 and the same argmax at every
// position; every greedy continuation: the same tokens. The faithful/reference cosine per prompt is printed
// (never tested against the reference golden: the profiles may differ a lot, MODEL-SPEC 9).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include <nlohmann/json.hpp>

#include "plumb/format/npy.h"
#include "plumb/model/model_v4.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden" / "v4";

struct Fixture {
  fs::path dir;    // goldens
  fs::path model;  // checkpoint: the fixture itself, or meta.json's "model" (a repo path)
  bool operator<(const Fixture& o) const { return dir < o.dir; }
};

std::vector<Fixture> fixtures() {
  std::vector<Fixture> r;
  if (!fs::exists(kGolden)) return r;
  for (const auto& e : fs::directory_iterator(kGolden)) {
    if (fs::exists(e.path() / "config.json")) {
      r.push_back({e.path(), e.path()});
    } else if (fs::exists(e.path() / "meta.json")) {
      std::ifstream f(e.path() / "meta.json");
      const nlohmann::json meta = nlohmann::json::parse(f);
      if (meta.contains("model")) r.push_back({e.path(), fs::path(PLUMB_SOURCE_DIR) / meta["model"].get<std::string>()});
    }
  }
  std::sort(r.begin(), r.end());
  return r;
}

// Files named <kind>_<L>.ids.npy, sorted by L.
std::vector<std::pair<int64_t, fs::path>> numbered(const fs::path& dir, const std::string& kind) {
  std::vector<std::pair<int64_t, fs::path>> r;
  const std::regex re(kind + "_([0-9]+)\\.ids\\.npy");
  std::smatch m;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, re)) r.push_back({std::stoll(m[1]), e.path()});
  }
  std::sort(r.begin(), r.end());
  return r;
}

std::vector<float> f32_array(const fs::path& p, std::vector<int64_t>* shape) {
  const NpyArray a = read_npy(p.string());
  EXPECT_EQ(a.dtype, DType::F32) << p;
  *shape = a.shape;
  std::vector<float> v(static_cast<std::size_t>(a.numel()));
  std::memcpy(v.data(), a.data.data(), v.size() * sizeof(float));
  return v;
}

TEST(V4Golden, ReferenceLogitsMatchHf) {
  const auto dirs = fixtures();
  if (dirs.empty()) FAIL() << "no fixtures under " << kGolden << ": they are committed";
  for (const auto& [dir, model_dir] : dirs) {
    auto ref = v4::ModelV4::load(model_dir.string(), {"cpu", 2, Numerics::Reference});
    auto fai = v4::ModelV4::load(model_dir.string(), {"cpu", 2, Numerics::Faithful});
    const int64_t V = ref->config().vocab_size;
    const auto prompts = numbered(dir, "prompt");
    EXPECT_FALSE(prompts.empty()) << dir;
    for (const auto& [L, ids_path] : prompts) {
      const std::vector<TokenId> ids = read_token_ids(ids_path.string());
      std::vector<int64_t> shape;
      const std::vector<float> hf = f32_array(dir / ("prompt_" + std::to_string(L) + ".logits.npy"), &shape);
      ASSERT_EQ(shape, (std::vector<int64_t>{L, V})) << ids_path;
      const std::vector<float> got = ref->prompt_logits(ids);
      double num = 0, den = 0;
      for (std::size_t i = 0; i < hf.size(); ++i) {
        num = std::max(num, std::fabs(double(got[i]) - hf[i]));
        den = std::max(den, std::fabs(double(hf[i])));
      }
      int64_t argmax_diff = 0;
      for (int64_t t = 0; t < L; ++t) {
        const std::span<const float> a(got.data() + t * V, V), b(hf.data() + t * V, V);
        argmax_diff += argmax(a) != argmax(b);
      }
      // Informational: how far the release's numerics move the logits on this random model.
      const std::vector<float> f = fai->prompt_logits(ids);
      double dot = 0, na = 0, nb = 0;
      for (std::size_t i = 0; i < f.size(); ++i) dot += double(f[i]) * got[i], na += double(f[i]) * f[i], nb += double(got[i]) * got[i];
      std::printf("[golden] %s prompt_%lld: max|diff|/max|ref| = %.3g, argmax mismatches %lld/%lld, faithful-vs-reference cosine %.5f\n",
                  dir.filename().c_str(), static_cast<long long>(L), num / den, static_cast<long long>(argmax_diff),
                  static_cast<long long>(L), dot / std::sqrt(na * nb));
      EXPECT_LE(num / den, 1e-4) << dir.filename() << " prompt_" << L;
      EXPECT_EQ(argmax_diff, 0) << dir.filename() << " prompt_" << L;
    }
  }
}

TEST(V4Golden, GreedyContinuationMatchesHf) {
  const auto dirs = fixtures();
  if (dirs.empty()) FAIL() << "no fixtures under " << kGolden << ": they are committed";
  for (const auto& [dir, model_dir] : dirs) {
    auto model = v4::ModelV4::load(model_dir.string(), {"cpu", 2, Numerics::Reference});
    for (const auto& [L, path] : numbered(dir, "greedy")) {
      const std::vector<TokenId> want = read_token_ids(path.string());
      const std::vector<TokenId> prompt = read_token_ids((dir / ("prompt_" + std::to_string(L) + ".ids.npy")).string());
      Model::GenerateOptions g;
      g.max_new_tokens = static_cast<int64_t>(want.size());
      g.stop_at_eos = false;  // the fixtures continue past EOS
      EXPECT_EQ(model->generate(prompt, g), want) << dir.filename() << " greedy_" << L;
    }
  }
}

}  // namespace
}  // namespace plumb
