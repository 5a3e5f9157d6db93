#include "inspect_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/convert/recognize.h"
#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/scan.h"
#include "plumb/model/checkpoint_summary.h"
#include "plumb/util/progress.h"

namespace plumb::cli {
namespace {

// A tensor-parallel split (plumb convert shard) is not one checkpoint: check it against the rules.
InspectReport inspect_tp_shards(const convert::TpShardSet& set, const std::string& path) {
  const convert::TpShardSummary s = convert::check_tp_shards(set, load_model_config(path));
  InspectReport r{convert::tp_summary_json(s, path), convert::tp_summary_text(s, path), {}};
  if (!s.problems.empty()) r.problem = fmt::format("{}: tensor-parallel set is inconsistent: {}", path, s.problems[0]);
  return r;
}

void list_tensors(const Checkpoint& ckpt, InspectReport& r) {
  for (const TensorInfo* t : ckpt.tensors()) {
    const std::string shard = ckpt.shards()[t->shard]->path();
    r.json["tensors"].push_back({{"name", t->name}, {"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                                 {"bytes", t->nbytes}, {"file", shard.substr(shard.find_last_of('/') + 1)}});
    r.text += fmt::format("{:<60} {:<8} {:<20} {:>12}\n", t->name, dtype_name(t->dtype), t->shape_str(), t->nbytes);
  }
}

}  // namespace

InspectReport inspect_checkpoint(const std::string& path, const InspectOptions& o) {
  if (const auto tp = convert::find_tp_shards(path)) return inspect_tp_shards(*tp, path);
  const Checkpoint ckpt = Checkpoint::open(path);
  const ModelConfig cfg = load_model_config(ckpt.root());
  const CheckpointSummary s = summarize_checkpoint(ckpt, cfg);
  InspectReport r;
  r.json = summary_json(s);
  const auto conversions = convert::conversion_log(ckpt.root());
  if (conversions) r.json["plumb_conversion"] = *conversions;
  if (o.tensors) list_tensors(ckpt, r);  // in the text, before the summary
  r.text += summary_text(s);
  if (conversions) r.text += fmt::format("converted     {}\n", convert::conversion_log_text(*conversions));
  ScanResult scan;
  if (o.scan) {
    scan = scan_checkpoint(ckpt, o.progress);
    r.json["scan"] = {{"tensors", scan.tensors_scanned}, {"bytes", scan.bytes_scanned}, {"findings", nlohmann::json::array()}};
    for (const auto& f : scan.findings) r.json["scan"]["findings"].push_back({{"tensor", f.tensor}, {"problem", f.problem}});
    r.text += fmt::format("scan          {} tensors, {}: {}\n", scan.tensors_scanned, format_bytes(scan.bytes_scanned),
                          scan.findings.empty() ? "no NaN/Inf, all scales in range" : "PROBLEMS");
    for (const auto& f : scan.findings) r.text += fmt::format("  {}: {}\n", f.tensor, f.problem);
  }
  if (s.binding && !s.binding->ok())
    r.problem = fmt::format("{}: checkpoint does not match its config: {}", ckpt.root(), s.binding->summary());
  else if (!scan.findings.empty())
    r.problem = fmt::format("{}: scan found {} problem(s), first: {}: {}", ckpt.root(), scan.findings.size(),
                            scan.findings[0].tensor, scan.findings[0].problem);
  return r;
}

}  // namespace plumb::cli
