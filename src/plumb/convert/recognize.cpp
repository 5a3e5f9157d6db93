// Recognizing conversion outputs for `plumb inspect`: tensor-parallel sets and conversion logs.
#include "plumb/convert/recognize.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <regex>

#include "plumb/convert/shard.h"
#include "plumb/format/json_util.h"
#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"
#include "plumb/util/mapped_file.h"
#include "plumb/util/progress.h"

namespace plumb::convert {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxProblems = 20;

struct Problems {
  std::vector<std::string>& out;
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    if (out.size() < kMaxProblems) out.push_back(fmt::format(f, std::forward<Args>(args)...));
  }
};

}  // namespace

std::optional<TpShardSet> find_tp_shards(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  static const std::regex pattern(R"(model(\d{1,6})-mp(\d{1,6})\.safetensors)");
  std::map<int64_t, std::map<int64_t, std::string>> by_tp;  // tp -> rank -> path
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, m, pattern)) by_tp[std::stoll(m[2])][std::stoll(m[1])] = it->path().string();
  }
  if (by_tp.empty()) return std::nullopt;
  // The N with the most files; files of other N are reported by check_tp_shards as strays.
  auto best = std::max_element(by_tp.begin(), by_tp.end(),
                               [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  TpShardSet set;
  set.tp = best->first;
  set.files.resize(static_cast<std::size_t>(std::max<int64_t>(set.tp, 0)));
  for (const auto& [tp, ranks] : by_tp)
    for (const auto& [rank, path] : ranks) {
      if (tp == set.tp && rank < set.tp)
        set.files[static_cast<std::size_t>(rank)] = path;
      else
        set.strays.push_back(path);
    }
  return set;
}

TpShardSummary check_tp_shards(const TpShardSet& set, const ModelConfig& cfg) {
  TpShardSummary s;
  s.tp = set.tp;
  Problems problems{s.problems};
  if (set.tp < 1) {
    problems.add("model*-mp{}.safetensors: a split needs at least one rank", set.tp);
    return s;
  }
  for (const auto& stray : set.strays) problems.add("{}: not rank 0..{} of a {}-way split", stray, set.tp - 1, set.tp);
  std::vector<std::unique_ptr<SafetensorsFile>> ranks;
  for (std::size_t r = 0; r < set.files.size(); ++r) {
    if (set.files[r].empty()) {
      problems.add("rank {}: {} is missing", r, tp_file_name(static_cast<int64_t>(r), set.tp));
      continue;
    }
    ranks.push_back(std::make_unique<SafetensorsFile>(set.files[r], r));
  }
  // name -> (rank -> info); the rank is TensorInfo::shard.
  std::map<std::string, std::map<std::size_t, const TensorInfo*>> where;
  for (const auto& f : ranks)
    for (const TensorInfo& t : f->tensors()) {
      where[t.name][t.shard] = &t;
      s.bytes += t.nbytes;
    }
  const int64_t experts = cfg.n_routed_experts, per_rank = experts % set.tp == 0 ? experts / set.tp : 0;
  if (per_rank == 0) problems.add("n_routed_experts {} does not split into {} equal non-empty parts", experts, set.tp);
  for (const auto& [name, in] : where) {
    const SplitRule rule = split_rule(cfg.arch, name);
    ++s.tensors;
    if (rule.kind == SplitRule::Expert) {
      ++s.experts;
      const auto want = static_cast<std::size_t>(per_rank ? rule.expert / per_rank : 0);
      if (per_rank && (in.size() != 1 || in.begin()->first != want))
        problems.add("{}: routed expert {} belongs in rank {} only, found in {} rank(s) starting at {}", name,
                     rule.expert, want, in.size(), in.begin()->first);
      continue;
    }
    ++(rule.kind == SplitRule::Split ? s.split : s.replicated);
    if (in.size() != set.files.size()) {
      problems.add("{}: in {} of {} ranks; a non-expert tensor must be in every rank", name, in.size(),
                   set.files.size());
      continue;
    }
    const TensorInfo& first = *in.begin()->second;
    for (const auto& [rank, t] : in)
      if (t->dtype != first.dtype || t->shape != first.shape)
        problems.add("{}: rank {} has {} {}, rank {} has {} {}", name, rank, dtype_name(t->dtype), t->shape_str(),
                     in.begin()->first, dtype_name(first.dtype), first.shape_str());
  }
  return s;
}

std::string tp_summary_text(const TpShardSummary& s, const std::string& dir) {
  std::string out;
  out += fmt::format("checkpoint    {}\n", dir);
  out += fmt::format("layout        tensor-parallel, {} ranks ({} .. {})\n", s.tp, tp_file_name(0, s.tp),
                     tp_file_name(s.tp - 1, s.tp));
  out += fmt::format("tensors       {} distinct: {} split, {} replicated, {} routed-expert; {} over all ranks\n",
                     s.tensors, s.split, s.replicated, s.experts, format_bytes(static_cast<double>(s.bytes)));
  if (s.problems.empty()) {
    out += "split rules   ok: every rank present, consistent with the tensor-parallel split rules\n";
  } else {
    out += fmt::format("split rules   PROBLEMS ({}{}):\n", s.problems.size(),
                       s.problems.size() >= kMaxProblems ? "+" : "");
    for (const auto& p : s.problems) out += "  " + p + "\n";
  }
  out += "note          plumb runs unsharded checkpoints; the config binding is checked on the source checkpoint\n";
  return out;
}

nlohmann::json tp_summary_json(const TpShardSummary& s, const std::string& dir) {
  return {{"path", dir},           {"layout", "tensor-parallel"}, {"tp", s.tp},           {"tensors", s.tensors},
          {"split", s.split},      {"replicated", s.replicated},  {"experts", s.experts}, {"total_bytes", s.bytes},
          {"problems", s.problems}};
}

std::optional<nlohmann::json> conversion_log(const std::string& dir) {
  const fs::path p =
      fs::is_directory(dir) ? fs::path(dir) / "config.json" : fs::path(dir).parent_path() / "config.json";
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  MappedFile file(p.string());
  const auto config =
      parse_json_strict(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), p.string());
  if (!config.is_object() || !config.contains("plumb_conversion") || !config["plumb_conversion"].is_array())
    return std::nullopt;
  return config["plumb_conversion"];
}

std::string conversion_log_text(const nlohmann::json& log) {
  std::string out;
  for (const auto& step : log) {
    if (!out.empty()) out += ", then ";
    const std::string cmd = step.value("command", "?");
    if (step.contains("tp"))
      out += fmt::format("{} tp {}", cmd, step["tp"].dump());
    else
      out += fmt::format("{} to {}", cmd, step.value("to", "?"));
    if (step.value("experts", false)) out += " (experts too)";
  }
  return out;
}

}  // namespace plumb::convert
