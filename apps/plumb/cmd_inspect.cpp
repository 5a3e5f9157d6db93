// plumb inspect MODEL_DIR [--tensors] [--json] [--scan]: what a checkpoint holds and whether it
// matches its config. Exit 2 when the binding or the scan finds a problem.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "plumb/convert/recognize.h"
#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/scan.h"
#include "plumb/model/checkpoint_summary.h"
#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool tensors = false, json = false, scan = false, no_progress = false;
};

// A tensor-parallel split (plumb convert shard) is not one checkpoint: check it against the rules.
int inspect_tp_shards(const convert::TpShardSet& set, const InspectArgs& a) {
  const convert::TpShardSummary s = convert::check_tp_shards(set, load_model_config(a.path));
  std::printf("%s", a.json ? (convert::tp_summary_json(s, a.path).dump(2) + "\n").c_str()
                           : convert::tp_summary_text(s, a.path).c_str());
  if (!s.problems.empty()) fail("{}: tensor-parallel set is inconsistent: {}", a.path, s.problems[0]);
  return 0;
}

int run_inspect(const InspectArgs& a) {
  if (const auto tp = convert::find_tp_shards(a.path)) return inspect_tp_shards(*tp, a);
  const Checkpoint ckpt = Checkpoint::open(a.path);
  const ModelConfig cfg = load_model_config(ckpt.root());
  const CheckpointSummary s = summarize_checkpoint(ckpt, cfg);
  nlohmann::json j = summary_json(s);
  const auto conversions = convert::conversion_log(ckpt.root());
  if (conversions) j["plumb_conversion"] = *conversions;

  if (a.tensors) {
    for (const TensorInfo* t : ckpt.tensors()) {
      const std::string shard = ckpt.shards()[t->shard]->path();
      if (a.json)
        j["tensors"].push_back({{"name", t->name}, {"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                                {"bytes", t->nbytes}, {"file", shard.substr(shard.find_last_of('/') + 1)}});
      else
        std::printf("%-60s %-8s %-20s %12llu\n", t->name.c_str(), std::string(dtype_name(t->dtype)).c_str(),
                    t->shape_str().c_str(), static_cast<unsigned long long>(t->nbytes));
    }
  }
  ScanResult scan;
  if (a.scan) {
    scan = scan_checkpoint(ckpt, !a.no_progress && !a.json);
    j["scan"] = {{"tensors", scan.tensors_scanned}, {"bytes", scan.bytes_scanned}, {"findings", nlohmann::json::array()}};
    for (const auto& f : scan.findings) j["scan"]["findings"].push_back({{"tensor", f.tensor}, {"problem", f.problem}});
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", summary_text(s).c_str());
    if (conversions) std::printf("converted     %s\n", convert::conversion_log_text(*conversions).c_str());
    if (a.scan) {
      std::printf("scan          %lld tensors, %s: %s\n", static_cast<long long>(scan.tensors_scanned),
                  format_bytes(scan.bytes_scanned).c_str(),
                  scan.findings.empty() ? "no NaN/Inf, all scales in range" : "PROBLEMS");
      for (const auto& f : scan.findings) std::printf("  %s: %s\n", f.tensor.c_str(), f.problem.c_str());
    }
  }
  if (s.binding && !s.binding->ok())
    fail("{}: checkpoint does not match its config: {}", ckpt.root(), s.binding->summary());
  if (!scan.findings.empty())
    fail("{}: scan found {} problem(s), first: {}: {}", ckpt.root(), scan.findings.size(), scan.findings[0].tensor,
         scan.findings[0].problem);
  return 0;
}

}  // namespace

Runner register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Summarize a checkpoint and check it against its config");
  auto a = std::make_shared<InspectArgs>();
  cmd->add_option("MODEL_DIR", a->path, "checkpoint directory (config.json + safetensors) or .safetensors file")
      ->required();
  cmd->add_flag("--tensors", a->tensors, "list every tensor (name, dtype, shape, bytes)");
  cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->add_flag("--scan", a->scan, "read every scale and bf16/f32 tensor; report NaN/Inf and out-of-range scales");
  cmd->add_flag("--no-progress", a->no_progress, "no progress bar during --scan");
  return [a]() { return run_inspect(*a); };
}

}  // namespace plumb::cli
