#pragma once
// What a KV storage format costs (issue #15 item 7): one long sequence fed through a model with
// its paged caches in each format, the logits at a few positions per context compared with those
// of f32 storage (cosine, max |diff|), and, for a text, the perplexity of the first `context`
// tokens (each token predicted from every token before it, one sequence, no windows). Every
// format is one prefill of the whole sequence in chunks; only the compared rows' logits (and,
// for perplexity, every row's log-probability of the next token) leave the device.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plumb/backend/kv_row.h"
#include "plumb/model/model.h"

namespace plumb::verify {

struct KvQualityFormat {
  std::string name;
  backend::KvStorage storage;
};
// f32, bf16 (entries and keys), fp8 (the release's fp8 entries + fp4 keys), fp8+recent1024 (the
// same with the entries of the last 1024 positions read in bf16: --kv-bf16-recent 1024).
std::vector<KvQualityFormat> kv_quality_formats();

struct KvQualityOptions {
  std::vector<std::int64_t> contexts;  // ascending; the largest must not exceed the ids
  std::int64_t chunk = 512;            // tokens per forward
  bool perplexity = false;             // score every next token (a text input)
};

struct KvQualityRow {
  std::string format;
  std::int64_t context = 0;
  std::vector<std::int64_t> positions;  // compared positions: context - 1 and earlier ones
  double cosine_last = 1, max_abs_last = 0;   // at position context - 1
  double cosine_min = 1, max_abs_max = 0;     // over all compared positions
  double ppl = 0;                             // 0 without perplexity
  double seconds = 0;                         // this format's prefill up to this context
};

// Positions compared at a context c: c - 1, c - 1 - c/8, c - 1 - c/4, c - 1 - c/2.
std::vector<std::int64_t> kv_quality_positions(std::int64_t context);

using KvQualityProgress = std::function<void(const std::string& format, std::int64_t done, std::int64_t total)>;

// Rows per format (the first is the reference: formats[0], normally f32) and context. Throws
// plumb::Error on contexts that are empty, unordered or longer than the ids.
std::vector<KvQualityRow> kv_quality(Model& model, std::span<const TokenId> ids, std::span<const KvQualityFormat> formats,
                                     const KvQualityOptions& options, const KvQualityProgress& progress = {});

nlohmann::json kv_quality_json(std::span<const KvQualityRow> rows);
std::string kv_quality_markdown(std::span<const KvQualityRow> rows);

}  // namespace plumb::verify
