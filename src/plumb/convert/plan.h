#pragma once
// A conversion is planned completely before anything is written: every output file with its
// tensors (name, dtype, shape) in write order, and for each tensor a producer that streams its
// bytes from the source. Knowing every shape up front is what allows streaming (headers first),
// an exact disk space check, and refusing bad input before DST exists. execute_plan is the one
// place that writes: atomic output dir, progress, index, config, side files, the report.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "plumb/convert/convert.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/safetensors_stream_writer.h"

namespace plumb::convert {

// Receives one output tensor's bytes, in order, in pieces.
using TensorSink = std::function<void(std::span<const std::byte>)>;
// Writes exactly the planned tensor's byte count to the sink, reading the source as it goes.
using Producer = std::function<void(const TensorSink&)>;

struct PlannedTensor {
  SafetensorsEntry entry;
  uint64_t source_bytes = 0;  // read from SRC, for the report
  Producer produce;
  bool converted = false;  // changed encoding or layout (counted in the report)
};

struct PlannedFile {
  std::string name;  // file name inside DST
  std::map<std::string, std::string> metadata;
};

struct ConversionPlan {
  std::string label;  // progress label
  std::vector<PlannedFile> files;
  // Execution order: (file index, tensor). Each file receives its tensors in this order, which is
  // also their order in its header, so files can be written interleaved (one per rank).
  std::vector<std::pair<std::size_t, PlannedTensor>> tensors;
  bool write_index = false;       // model.safetensors.index.json over the output files
  nlohmann::ordered_json config;  // config.json as written
  int64_t dropped = 0;
};

// SRC as a checkpoint directory: must be a directory holding config.json.
std::filesystem::path source_dir(const std::string& src);

// config.json of `dir`, key order preserved.
nlohmann::ordered_json read_config_json(const std::filesystem::path& dir);
// Appends `step` to the config's "plumb_conversion" list, so a chain of conversions is recorded.
void note_conversion(nlohmann::ordered_json& config, nlohmann::ordered_json step);

// A producer copying tensor `t` unchanged, in bounded pieces.
Producer copy_of(const Checkpoint& ckpt, const TensorInfo& t);

ConvertReport execute_plan(const std::filesystem::path& src, const ConversionPlan& plan, const ConvertOutput& out);

}  // namespace plumb::convert
