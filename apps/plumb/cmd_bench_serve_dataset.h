#pragma once
// The prompts of `plumb bench serve`: a random dataset (token-id prompts of drawn lengths, like
// vLLM's and SGLang's `random`) or a JSON-lines file of prompts.
#include <cstdint>
#include <string>
#include <vector>

#include "cmd_bench_serve_client.h"

namespace plumb::cli::bench {

struct DatasetOptions {
  std::string kind = "random";  // random | file
  std::string path;             // file: one JSON object a line: {"prompt": text | [ids]} or {"messages": [...]},
                                // optional "max_tokens"
  std::int64_t num_prompts = 1000;
  // random: lengths uniform in [len * (1 - ratio), len * (1 + ratio)], at least 1; token ids
  // uniform in [kFirstRandomId, vocab) so that they are ordinary tokens of any vocabulary that large.
  std::int64_t input_len = 1024, output_len = 128;
  double range_ratio = 0;
  std::int64_t vocab = 5000;
  std::uint64_t seed = 0;
};

constexpr std::int64_t kFirstRandomId = 100;

// Throws plumb::Error naming the flag, or the file and line, and what was expected.
std::vector<Prompt> make_dataset(const DatasetOptions& options);

}  // namespace plumb::cli::bench
