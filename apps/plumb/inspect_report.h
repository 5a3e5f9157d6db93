#pragma once
// What `plumb inspect` says about a checkpoint, as text and JSON, for inspect itself and for
// `plumb doctor --model` (which shows the same summary and scan).
#include <string>

#include <nlohmann/json.hpp>

namespace plumb::cli {

struct InspectOptions {
  bool tensors = false;   // list every tensor
  bool scan = false;      // read every scale and bf16/f32 tensor for NaN/Inf and bad scales
  bool progress = false;  // a progress bar on stderr during the scan
};

struct InspectReport {
  nlohmann::json json;
  std::string text;
  std::string problem;  // the first problem as an error message; empty when the checkpoint is sound
};

// Throws plumb::Error when `path` cannot be opened as a checkpoint (or tensor-parallel set) at all.
InspectReport inspect_checkpoint(const std::string& path, const InspectOptions& options);

}  // namespace plumb::cli
