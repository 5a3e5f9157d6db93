#pragma once
// `plumb convert`: offline checkpoint conversions. Each reads SRC (a checkpoint directory with
// config.json) through mmap views and writes DST tensor by tensor with bounded memory, into a
// temporary directory renamed into place when complete (see format/output_dir.h). Every refusal (an
// existing DST, too little disk space, a tensor that cannot be converted exactly or split) happens
// before the first byte is written.
#include <cstdint>
#include <string>
#include <vector>

namespace plumb::convert {

struct ConvertOutput {
  std::string dst;
  bool force = false;    // replace an existing DST (after the new one is complete)
  bool progress = true;  // progress bar on stderr
};

struct ConvertReport {
  std::string dst;
  int64_t files = 0;           // safetensors files written
  int64_t tensors = 0;         // tensors written (over all files)
  int64_t converted = 0;       // tensors whose encoding changed (cast / re-encoded / split)
  int64_t dropped = 0;         // tensors not written (scales of dequantized weights)
  uint64_t bytes_read = 0;     // tensor bytes read from SRC (a replicated tensor counts per rank)
  uint64_t bytes_written = 0;  // safetensors bytes written
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;  // getrusage peak for the whole process
};

// FP8 weights (E8M0 or F32 128x128 scales: V4 `.scale`, V3 `weight_scale_inv`) to BF16 (RNE),
// scales dropped; FP4 experts too when `experts` (else copied unchanged with their scales).
// config.json loses quantization_config (and expert_dtype when experts are cast) and records the
// step in `plumb_conversion`; the index and the other files are carried over.
struct CastOptions {
  std::string src;
  ConvertOutput out;
  bool experts = false;
};
ConvertReport convert_cast(const CastOptions& o);

// FP4 routed experts re-encoded losslessly to FP8 e4m3 with 128x128 ue8m0 scales (fp4_to_fp8.h);
// refuses, naming tensor and block, when any block is not exactly representable.
struct ExpertsOptions {
  std::string src;
  ConvertOutput out;
};
ConvertReport convert_experts_fp8(const ExpertsOptions& o);

// Tensor-parallel split into model{rank}-mp{tp}.safetensors (rules in shard.h).
struct ShardOptions {
  std::string src;
  ConvertOutput out;
  int64_t tp = 1;
};
ConvertReport convert_shard(const ShardOptions& o);

// One line per report field, for the CLI.
std::string report_text(const ConvertReport& r);

}  // namespace plumb::convert
