#pragma once
// What `plumb run` and `plumb chat` share: the model flags, the sampling and stop flags, loading
// the model with its tokenizer, the startup self-check and streaming text to stdout.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/model/model.h"
#include "plumb/runtime/generate.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::cli {

struct GenerationFlags {
  std::string model, numerics = "reference", backend = "cpu";
  int threads = 0;
  std::int64_t max_new_tokens = 256;
  std::vector<std::string> stops;
  bool greedy = false, self_check = false;
  SamplingParams values;  // the sampling flags' values; each applies only when given
  // The options whose values override the model's generation_config.json defaults.
  CLI::Option *temperature = nullptr, *top_k = nullptr, *top_p = nullptr, *min_p = nullptr,
              *repetition_penalty = nullptr, *presence_penalty = nullptr, *frequency_penalty = nullptr, *seed = nullptr;
};

void add_generation_flags(CLI::App& cmd, GenerationFlags& f);

// An integer flag check that says "must be at least N, got X" (CLI11's own range checks print
// their bounds as 300-digit doubles). Non-numbers are left to CLI11's conversion error.
CLI::Validator at_least(long long min);

// --threads: 0 (one per hardware thread) up to this machine's hardware threads; more would only
// slow down (and 100000 exhausts the system's threads for every process).
CLI::Validator thread_count();

// Refuses `tokens` (a prompt plus the tokens to generate, say) when they do not fit the model's
// context, max_position_embeddings; `what` describes them in the message.
void check_fits_context(std::int64_t tokens, const ModelConfig& cfg, std::string_view what);

struct LoadedModel {
  Tokenizer tokenizer;
  std::unique_ptr<Model> model;
  GenerationOptions options;  // sampling defaults from the model directory, then the flags
};

// Loads the tokenizer and the model of `f.model` and resolves the generation options.
LoadedModel load_for_generation(const GenerationFlags& f);

// Runs self_check (model/session.h) on a fixed prompt and reports it on stderr; throws when it fails.
void report_self_check(LoadedModel& m);

// Writes `text` to stdout and flushes, so a reader sees each chunk as it is generated.
void print_now(std::string_view text);

// The stats line for stderr, with the seed when sampling (so the run can be repeated).
std::string stats_with_seed(const GenerationResult& r, const SamplingParams& s);

}  // namespace plumb::cli
