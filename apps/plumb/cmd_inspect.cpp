// plumb inspect MODEL_DIR [--tensors] [--json] [--scan]: what a checkpoint holds and whether it
// matches its config. Exit 2 when the binding or the scan finds a problem.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "inspect_report.h"
#include "plumb/util/error.h"

namespace plumb::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool tensors = false, json = false, scan = false, no_progress = false;
};

int run_inspect(const InspectArgs& a) {
  const InspectReport r = inspect_checkpoint(a.path, {a.tensors, a.scan, !a.no_progress && !a.json});
  std::fputs(a.json ? (r.json.dump(2) + "\n").c_str() : r.text.c_str(), stdout);
  if (!r.problem.empty()) fail("{}", r.problem);
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
