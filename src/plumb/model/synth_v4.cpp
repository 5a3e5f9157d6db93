#include "plumb/model/synth_v4.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "plumb/format/output_dir.h"
#include "plumb/format/codecs.h"
#include "plumb/format/quantize.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/layout_v4.h"
#include "plumb/util/error.h"
#include "plumb/util/thread_pool.h"

namespace plumb::v4 {
namespace {

namespace fs = std::filesystem;
using Shape = std::vector<int64_t>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The release groups tensors into shards: embed, each layer, the final norm/head/hc_head, each
// MTP layer. The group of a name is its first one or two dotted components.
std::string shard_group(const std::string& name) {
  auto dot = name.find('.');
  std::string first = name.substr(0, dot);
  if (first == "layers" || first == "mtp") return name.substr(0, name.find('.', dot + 1));
  if (first == "embed") return "embed";
  return "head";
}

// Layout visitor that invents every tensor with magnitudes that keep activations O(1):
// linears ~ N(0, 1/fan_in), norms ~ 1 +- 0.1, mHC logits O(1), random distinct hash routes.
class Synthesizer {
 public:
  Synthesizer(const ModelConfig& c, uint64_t seed, bool fp8_experts)
      : cfg_(c), rng_(seed), fp8_experts_(fp8_experts) {}

  WeightView dense(const std::string& name, const Shape& shape) {
    std::vector<float> v = values_for(name, shape);
    const bool f32 = name.find("hc_") != std::string::npos || ends_with(name, "ape") ||
                     ends_with(name, "attn_sink") || ends_with(name, "gate.bias");
    if (f32) {
      put(name, DType::F32, shape, to_bytes(v));
    } else {
      std::vector<uint16_t> b(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
      put(name, DType::BF16, shape, to_bytes(b));
    }
    return {};
  }

  WeightView ints(const std::string& name, const Shape& shape) {  // tid2eid: distinct per row
    std::vector<int64_t> ids(static_cast<std::size_t>(shape[0] * shape[1]));
    std::vector<int64_t> perm(static_cast<std::size_t>(cfg_.n_routed_experts));
    for (int64_t r = 0; r < shape[0]; ++r) {
      for (std::size_t e = 0; e < perm.size(); ++e) perm[e] = static_cast<int64_t>(e);
      std::shuffle(perm.begin(), perm.end(), rng_);
      for (int64_t k = 0; k < shape[1]; ++k) ids[r * shape[1] + k] = perm[k];
    }
    put(name, DType::I64, shape, to_bytes(ids));
    return {};
  }

  WeightView linear(const std::string& name, int64_t rows, int64_t cols, bool routed_expert) {
    std::vector<float> w = gaussian(rows * cols, 1.0f / std::sqrt(static_cast<float>(cols)));
    const std::string base = name.substr(0, name.size() - std::string(".weight").size());
    if (routed_expert && !fp8_experts_) {
      QuantizedWeight q = quantize(w, rows, cols, true);
      put(name, DType::I8, {rows, cols / 2}, to_bytes(q.data));
      put(base + ".scale", DType::F8_E8M0, {rows, (cols + 31) / 32}, to_bytes(q.scales));
    } else {
      QuantizedWeight q = quantize(w, rows, cols, false);
      put(name, DType::F8_E4M3, {rows, cols}, to_bytes(q.data));
      put(base + ".scale", DType::F8_E8M0, {(rows + 127) / 128, (cols + 127) / 128}, to_bytes(q.scales));
    }
    return {};
  }

  std::map<std::string, SafetensorsWriter>& shards() { return shards_; }
  std::vector<std::string>& group_order() { return order_; }
  std::map<std::string, std::string>& shard_of() { return shard_of_; }
  int64_t tensors = 0;
  uint64_t bytes = 0;

 private:
  std::vector<float> values_for(const std::string& name, const Shape& shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    if (ends_with(name, "norm.weight")) return around(n, 1.0f, 0.1f);
    if (ends_with(name, "_fn")) return gaussian(n, 1.0f / std::sqrt(static_cast<float>(shape[1])));
    if (ends_with(name, "_base")) return gaussian(n, 0.5f);
    if (ends_with(name, "_scale")) return around(n, 0.6f, 0.2f);
    if (ends_with(name, "ape")) return gaussian(n, 0.5f);
    if (ends_with(name, "attn_sink")) return gaussian(n, 1.0f);
    if (ends_with(name, "gate.bias")) return gaussian(n, 0.1f);
    if (name == "embed.weight") return gaussian(n, 1.0f);
    return gaussian(n, 1.0f / std::sqrt(static_cast<float>(shape.back())));  // projections
  }

  std::vector<float> gaussian(int64_t n, float stddev) {
    std::vector<float> v(static_cast<std::size_t>(n));
    if (n < kParallelElements) {  // small tensors: one sequential stream (the committed tiny models)
      std::normal_distribution<float> d(0.f, stddev);
      for (auto& x : v) x = d(rng_);
      return v;
    }
    // Large tensors (real-size benchmark checkpoints, billions of values): fixed chunks, each with
    // its own generator seeded from one draw of the main stream and the chunk index, so the values
    // do not depend on the thread count.
    const uint64_t base = rng_();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    pool_.parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        std::mt19937_64 r(base ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(c + 1)));
        std::normal_distribution<float> d(0.f, stddev);
        for (int64_t i = c * kChunk, e = std::min(n, (c + 1) * kChunk); i < e; ++i) v[i] = d(r);
      }
    });
    return v;
  }

  // quantize_fp4_block32 / quantize_fp8_block128 over row bands in parallel (bands of whole scale
  // blocks, so the result is the same as one call).
  QuantizedWeight quantize(const std::vector<float>& w, int64_t rows, int64_t cols, bool fp4) {
    if (rows * cols < kParallelElements) return fp4 ? quantize_fp4_block32(w.data(), rows, cols) : quantize_fp8_block128(w.data(), rows, cols);
    const int64_t band = 128, bands = (rows + band - 1) / band;
    const int64_t data_row = fp4 ? cols / 2 : cols, scale_row = fp4 ? (cols + 31) / 32 : (cols + 127) / 128;
    QuantizedWeight q;
    q.data.resize(static_cast<std::size_t>(rows * data_row));
    q.scales.resize(static_cast<std::size_t>(fp4 ? rows * scale_row : bands * scale_row));
    pool_.parallel_for(bands, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * band, n = std::min(rows, r0 + band) - r0;
        const QuantizedWeight part =
            fp4 ? quantize_fp4_block32(w.data() + r0 * cols, n, cols) : quantize_fp8_block128(w.data() + r0 * cols, n, cols);
        std::memcpy(q.data.data() + r0 * data_row, part.data.data(), part.data.size());
        std::memcpy(q.scales.data() + (fp4 ? r0 * scale_row : b * scale_row), part.scales.data(), part.scales.size());
      }
    });
    return q;
  }
  std::vector<float> around(int64_t n, float center, float spread) {
    std::uniform_real_distribution<float> d(center - spread, center + spread);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(rng_);
    return v;
  }

  void put(const std::string& name, DType dt, const Shape& shape, std::vector<std::byte> data) {
    const std::string g = shard_group(name);
    if (!shards_.count(g)) order_.push_back(g);
    ++tensors;
    bytes += data.size();
    shard_of_[name] = g;
    shards_[g].add(name, dt, shape, std::move(data));
  }

  static constexpr int64_t kParallelElements = int64_t{1} << 22;
  static constexpr int64_t kChunk = int64_t{1} << 16;
  const ModelConfig& cfg_;
  std::mt19937_64 rng_;
  ThreadPool pool_;
  bool fp8_experts_;
  std::map<std::string, SafetensorsWriter> shards_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> shard_of_;
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  if (!f) fail("{}: cannot write", p.string());
}

}  // namespace

SynthResult synthesize_checkpoint(const SynthOptions& opt) {
  const ModelConfig cfg = load_model_config(opt.config_path);
  if (cfg.arch != Arch::DeepseekV4) fail("{}: synth writes deepseek_v4 checkpoints only", opt.config_path);
  const fs::path out(opt.out_dir);
  const fs::path config_file =
      fs::is_directory(opt.config_path) ? fs::path(opt.config_path) / "config.json" : fs::path(opt.config_path);
  // Written into OUT.tmp-<pid> (never an unrelated OUT.tmp) and renamed into place when complete;
  // on any failure the temporary directory is removed. Refused up front: an existing OUT without
  // --force, an OUT holding the config (--force would delete it), "/"-like names. (Synthetic
  // checkpoints are small, so the free space check is left to the writes.)
  AtomicOutputDir dir(config_file, out, opt.force, 0);

  Synthesizer s(cfg, opt.seed, opt.fp8_experts);
  walk_model(s, cfg, opt.with_mtp);

  const fs::path& tmp = dir.tmp();
  const auto& order = s.group_order();
  const int64_t n = static_cast<int64_t>(order.size());
  std::map<std::string, std::string> file_of_group;
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
    file_of_group[order[i]] = file;
    s.shards()[order[i]].write((tmp / file).string());
    total += fs::file_size(tmp / file);
  }
  nlohmann::json index;
  index["metadata"]["total_size"] = s.bytes;
  for (const auto& [name, group] : s.shard_of()) index["weight_map"][name] = file_of_group[group];
  write_text(tmp / "model.safetensors.index.json", index.dump(2) + "\n");
  fs::copy_file(config_file, tmp / "config.json");
  dir.commit();
  return {s.tensors, total, n};
}

}  // namespace plumb::v4
