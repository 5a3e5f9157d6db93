// plumb convert shard --tp N: split rules and the streaming split into one file per rank.
#include "plumb/convert/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "plumb/convert/convert.h"
#include "plumb/convert/plan.h"
#include "plumb/convert/source.h"
#include "plumb/format/json_util.h"
#include "plumb/util/error.h"

namespace plumb::convert {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kProblemsShown = 8;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The module name of a parameter: the component before the last ("layers.0.attn.wq_b" for
// "...wq_b.weight" / "...wq_b.scale" / "...wq_b.weight_scale_inv" gives "wq_b").
std::string module_key(const std::string& name) {
  std::string stem = name;
  if (ends_with(stem, ".weight_scale_inv"))
    stem.resize(stem.size() - std::string_view(".weight_scale_inv").size());
  else if (const auto dot = stem.rfind('.'); dot != std::string::npos)
    stem.resize(dot);
  const auto dot = stem.rfind('.');
  return dot == std::string::npos ? stem : stem.substr(dot + 1);
}

// Rank r's part of tensor t split `n` ways along `dim`: `outer` runs of `seg` bytes, `stride` apart.
Producer slice_of(const Checkpoint& ckpt, const TensorInfo& t, int dim, int64_t rank, int64_t n) {
  return [&ckpt, &t, dim, rank, n](const TensorSink& sink) {
    const SourceTensor src(ckpt, t);
    const auto bytes = src.bytes();
    std::size_t outer = 1, inner = dtype_size(t.dtype);
    for (int d = 0; d < dim; ++d) outer *= static_cast<std::size_t>(t.shape[d]);
    for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < t.shape.size(); ++d)
      inner *= static_cast<std::size_t>(t.shape[d]);
    const std::size_t stride = static_cast<std::size_t>(t.shape[dim]) * inner,
                      seg = stride / static_cast<std::size_t>(n);
    if (outer == 1) {  // a split on the outermost dim is one contiguous run
      src.for_each_piece(bytes.subspan(static_cast<std::size_t>(rank) * seg, seg), kCopyPieceBytes, sink);
      return;
    }
    const std::size_t group = std::max<std::size_t>(1, kCopyPieceBytes / stride);
    for (std::size_t g = 0; g < outer; g += group) {
      const std::size_t end = std::min(outer, g + group);
      for (std::size_t i = g; i < end; ++i) sink(bytes.subspan(i * stride + static_cast<std::size_t>(rank) * seg, seg));
      src.release(bytes.subspan(g * stride, (end - g) * stride));
    }
  };
}

// Why tensor t cannot be split `n` ways along `dim`, or "". A scale is not checked itself: its
// weight's check (whole blocks per rank) implies that the scale grid divides.
std::string split_problem(const TensorInfo& t, int dim, int64_t n, const QuantMap& quant) {
  if (quant.is_scale(t.name)) return "";
  if (static_cast<std::size_t>(dim) >= t.shape.size())
    return fmt::format("{} {}: the rule splits dim {}, which it does not have", t.name, t.shape_str(), dim);
  const int64_t size = t.shape[dim];
  if (size % n != 0)
    return fmt::format("{} {}: dim {} has size {}, not divisible by --tp {}", t.name, t.shape_str(), dim, size, n);
  if (const QuantizedTensor* q = quant.weight(t.name); q && n > 1) {
    const int64_t block = dim == 0 ? q->block_rows() : q->block_cols();
    if ((size / n) % block != 0)
      return fmt::format(
          "{} {}: splitting dim {} ({}) {} ways gives {} per rank, which cuts a {}-element scale block (scale {} {}); "
          "pick a --tp that keeps whole blocks, or cast to bf16 first (plumb convert cast)",
          t.name, t.shape_str(), dim, size, n, size / n, block, q->scale->name, q->scale->shape_str());
  }
  return "";
}

}  // namespace

SplitRule split_rule(Arch arch, const std::string& name) {
  if (const auto e = routed_expert_id(name)) return {SplitRule::Expert, 0, *e};
  if (arch == Arch::DeepseekV4 && ends_with(name, ".attn_sink")) return {SplitRule::Split, 0, 0};
  static const std::set<std::string> v4_rows = {"embed", "wq_b", "wo_a", "head", "weights_proj"};
  static const std::set<std::string> v3_rows = {"embed_tokens", "q_proj",  "q_b_proj", "kv_b_proj",
                                                "gate_proj",    "up_proj", "lm_head",  "head"};
  const std::string key = module_key(name);
  if (arch == Arch::DeepseekV4) {
    if (v4_rows.contains(key)) return {SplitRule::Split, 0, 0};
    if (key == "wo_b") return {SplitRule::Split, 1, 0};
  } else {
    if (v3_rows.contains(key)) return {SplitRule::Split, 0, 0};
    if (key == "o_proj" || key == "down_proj") return {SplitRule::Split, 1, 0};
  }
  return {};
}

std::string tp_file_name(int64_t rank, int64_t tp) { return fmt::format("model{}-mp{}.safetensors", rank, tp); }

ConvertReport convert_shard(const ShardOptions& o) {
  const fs::path src = source_dir(o.src);
  const Checkpoint ckpt = Checkpoint::open(src.string());
  const ModelConfig cfg = load_model_config(src.string());
  const QuantMap quant(ckpt);
  const int64_t n = o.tp, experts = cfg.n_routed_experts;
  if (n < 1) fail("--tp must be at least 1, got {}", n);
  if (experts % n != 0)
    fail("{}: n_routed_experts {} is not divisible by --tp {}; each rank must hold the same number of experts",
         src.string(), experts, n);

  ConversionPlan plan;
  plan.label = fmt::format("shard tp{}", n);
  for (int64_t r = 0; r < n; ++r) plan.files.push_back({tp_file_name(r, n), ckpt.shards().front()->metadata()});
  std::vector<std::string> problems;
  for (const auto& shard : ckpt.shards()) {
    for (const TensorInfo& t : shard->tensors()) {
      const SplitRule rule = split_rule(cfg.arch, t.name);
      if (rule.kind == SplitRule::Expert) {
        if (rule.expert >= experts) {
          problems.push_back(
              fmt::format("{}: expert id {} but the config has n_routed_experts {}", t.name, rule.expert, experts));
          continue;
        }
        const auto rank = static_cast<std::size_t>(rule.expert / (experts / n));
        plan.tensors.emplace_back(rank, PlannedTensor{{t.name, t.dtype, t.shape}, t.nbytes, copy_of(ckpt, t)});
      } else if (rule.kind == SplitRule::Replicate) {
        for (int64_t r = 0; r < n; ++r)
          plan.tensors.emplace_back(static_cast<std::size_t>(r),
                                    PlannedTensor{{t.name, t.dtype, t.shape}, t.nbytes, copy_of(ckpt, t)});
      } else if (std::string p = split_problem(t, rule.dim, n, quant); !p.empty()) {
        problems.push_back(std::move(p));
      } else {
        std::vector<int64_t> part = t.shape;
        part[rule.dim] /= n;
        for (int64_t r = 0; r < n; ++r)
          plan.tensors.emplace_back(
              static_cast<std::size_t>(r),
              PlannedTensor{{t.name, t.dtype, part}, t.nbytes / n, slice_of(ckpt, t, rule.dim, r, n), true});
      }
    }
  }
  if (!problems.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min(problems.size(), kProblemsShown); ++i) list += "\n  " + problems[i];
    fail("{}: cannot split {} ways: {} tensor(s) do not divide; refusing (no output written):{}{}", src.string(), n,
         problems.size(), list, problems.size() > kProblemsShown ? "\n  ..." : "");
  }
  plan.config = read_config_json(src);
  note_conversion(plan.config,
                  {{"command", "shard"}, {"tp", n}, {"files", tp_file_name(0, n) + " .. " + tp_file_name(n - 1, n)}});
  return execute_plan(src, plan, o.out);
}

}  // namespace plumb::convert
