#pragma once
// What `plumb inspect` needs to recognize conversion outputs: a tensor-parallel directory of
// model{r}-mp{N}.safetensors files (not one checkpoint: replicated tensors are in every file, so
// it is checked against the split rules instead of being opened), and the conversion log a
// converted checkpoint's config.json carries.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plumb/format/config.h"

namespace plumb::convert {

struct TpShardSet {
  int64_t tp = 0;
  std::vector<std::string> files;   // files[r] = path of rank r, "" when missing
  std::vector<std::string> strays;  // model*-mp*.safetensors files of another N or rank >= N
};
// nullopt when `dir` is not a directory or holds no model*-mp*.safetensors file. With files of
// several N, the N with the most files is taken and the others are strays.
std::optional<TpShardSet> find_tp_shards(const std::string& dir);

struct TpShardSummary {
  int64_t tp = 0;
  int64_t tensors = 0;  // distinct tensor names over all ranks
  int64_t split = 0, replicated = 0, experts = 0;
  uint64_t bytes = 0;                 // all rank files' tensor bytes
  std::vector<std::string> problems;  // empty: every rank is present and consistent with the rules
};
// Reads every rank's header and checks the set against the split rules (shard.h): each rank
// present, no strays, each non-expert tensor in every rank with the same dtype and shape, each
// routed expert in exactly the rank the rule assigns.
TpShardSummary check_tp_shards(const TpShardSet& set, const ModelConfig& cfg);
std::string tp_summary_text(const TpShardSummary& s, const std::string& dir);
nlohmann::json tp_summary_json(const TpShardSummary& s, const std::string& dir);

// The "plumb_conversion" list of DIR/config.json, or nullopt for an unconverted checkpoint.
std::optional<nlohmann::json> conversion_log(const std::string& dir);
// One line: "cast to bf16, then shard tp 2".
std::string conversion_log_text(const nlohmann::json& log);

}  // namespace plumb::convert
