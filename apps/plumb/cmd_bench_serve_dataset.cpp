#include "cmd_bench_serve_dataset.h"

#include <cmath>
#include <fstream>
#include <random>

#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb::cli::bench {
namespace {

using Json = nlohmann::json;

std::int64_t draw_length(std::mt19937_64& rng, std::int64_t len, double ratio) {
  const auto lo = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(static_cast<double>(len) * (1 - ratio))));
  const auto hi = std::max(lo, static_cast<std::int64_t>(std::ceil(static_cast<double>(len) * (1 + ratio))));
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

std::vector<Prompt> random_dataset(const DatasetOptions& o) {
  if (o.input_len < 1 || o.output_len < 1) fail("--random-input-len and --random-output-len must be at least 1");
  if (o.range_ratio < 0 || o.range_ratio >= 1) fail("--random-range-ratio must be in [0, 1), got {}", o.range_ratio);
  if (o.vocab <= kFirstRandomId) fail("--random-vocab-size must be above {}, got {}", kFirstRandomId, o.vocab);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<std::int64_t> id(kFirstRandomId, o.vocab - 1);
  std::vector<Prompt> out;
  for (std::int64_t i = 0; i < o.num_prompts; ++i) {
    Prompt p;
    p.input_len = draw_length(rng, o.input_len, o.range_ratio);
    p.output_len = draw_length(rng, o.output_len, o.range_ratio);
    p.prompt = Json::array();
    for (std::int64_t k = 0; k < p.input_len; ++k) p.prompt.push_back(id(rng));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Prompt> file_dataset(const DatasetOptions& o) {
  if (o.path.empty()) fail("--dataset file needs --dataset-path FILE.jsonl");
  std::ifstream in = open_regular_stream(o.path, "--dataset-path file");
  std::vector<Prompt> out;
  std::string line;
  for (std::size_t number = 1;
       static_cast<std::int64_t>(out.size()) < o.num_prompts && read_line(in, line, fmt::format("{}:{}", o.path, number)); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, false);
    const auto bad = [&](const char* what) { fail("{}:{}: {}", o.path, number, what); };
    if (!j.is_object()) bad("expected one JSON object a line");
    Prompt p;
    if (j.contains("messages") && j["messages"].is_array()) p.prompt = j["messages"];
    else if (j.contains("prompt") && (j["prompt"].is_string() || j["prompt"].is_array())) p.prompt = j["prompt"];
    else bad("expected \"prompt\" (text or token ids) or \"messages\" (an array)");
    p.output_len = o.output_len;
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<std::int64_t>() < 1) bad("\"max_tokens\" must be an integer >= 1");
      p.output_len = j["max_tokens"];
    }
    if (p.prompt.is_array() && !p.prompt.empty() && p.prompt[0].is_number_integer()) p.input_len = static_cast<std::int64_t>(p.prompt.size());
    out.push_back(std::move(p));
  }
  if (out.empty()) fail("--dataset-path {}: no prompts in the file", o.path);
  return out;
}

}  // namespace

std::vector<Prompt> make_dataset(const DatasetOptions& o) {
  if (o.num_prompts < 1) fail("--num-prompts must be at least 1, got {}", o.num_prompts);
  if (o.kind == "random") return random_dataset(o);
  if (o.kind == "file") return file_dataset(o);
  fail("--dataset '{}': expected random or file", o.kind);
}

}  // namespace plumb::cli::bench
