#pragma once
// Value scan of a checkpoint: every scale tensor and every bf16/f16/f32 tensor is read and
// checked for NaN/Inf, and scales for values no real quantizer produces. On the real release
// this reads ~150 GB, so it reports progress.
#include <cstdint>
#include <string>
#include <vector>

#include "plumb/format/safetensors.h"

namespace plumb {

struct ScanFinding {
  std::string tensor;
  std::string problem;  // "3 NaN values (first at element 17)"
};

struct ScanResult {
  int64_t tensors_scanned = 0;
  uint64_t bytes_scanned = 0;
  std::vector<ScanFinding> findings;
};

// A scale is a tensor named *.scale or *.weight_scale_inv. Scales must be finite, > 0 and within
// [2^-80, 2^40]: an E8M0 byte outside that (or 0xFF = NaN) marks a corrupt or mis-typed file.
bool is_scale_tensor(const std::string& name);
ScanResult scan_checkpoint(const Checkpoint& ckpt, bool show_progress);

}  // namespace plumb
