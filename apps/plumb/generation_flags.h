#pragma once
// What `plumb run` and `plumb chat` share: the engine flags, the sampling and stop flags,
// starting the engine with its tokenizer, the startup self-check, and one streamed completion
// through the engine with its stats line.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine_flags.h"
#include "plumb/runtime/generate_one.h"

namespace plumb::cli {

struct GenerationFlags {
  EngineFlags engine;  // --model, the model flags and the engine's
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
// A duration in seconds: positive, or also 0 with zero_allowed (CLI11's PositiveNumber prints
// its range with a 309-digit bound).
CLI::Validator seconds(bool zero_allowed);

// --threads: 0 (one per hardware thread) up to this machine's hardware threads; more would only
// slow down (and 100000 exhausts the system's threads for every process).
CLI::Validator thread_count();

// Refuses `tokens` (a prompt plus the tokens to generate, say) when they do not fit the model's
// context, max_position_embeddings; `what` describes them in the message.
void check_fits_context(std::int64_t tokens, const ModelConfig& cfg, std::string_view what);

// The engine of a generating command and the request each of its prompts starts from.
struct Generator {
  ModelConfig config;
  StartedEngine started;      // the tokenizer and the engine thread
  runtime::Request defaults;  // sampling (generation_config.json, then the flags), max_tokens, stops
  const Tokenizer& tokenizer() const { return *started.tokenizer; }
};

// Loads the tokenizer and the model of `f.engine.model`, starts the engine (no memory table:
// these commands serve one request at a time) and resolves the request defaults.
Generator start_generator(const GenerationFlags& f);

// Runs the self-check (runtime/self_check.h) on a fixed prompt and reports it on stderr; throws
// when it fails.
void report_self_check(Generator& g);

// Writes `text` to stdout and flushes, so a reader sees each chunk as it is generated.
void print_now(std::string_view text);

// One completion of `prompt` with the defaults, its text printed to stdout as it streams.
struct Completion {
  runtime::RequestResult result;
  double prefill_seconds = 0;  // submit to the first token (the uncached prompt tokens)
  double decode_seconds = 0;   // first token to the last
};
// Throws plumb::Error when the request fails (the engine's message).
Completion complete_streamed(Generator& g, std::vector<TokenId> prompt);

// "12 prompt tokens (0 cached), 60 generated (eos); prefill 310.5 tok/s (0.039 s), decode 42.0
// tok/s (1.403 s), greedy" (or ", seed N" when sampling, so the run can be repeated).
std::string stats_line(const Completion& c, const Generator& g);

}  // namespace plumb::cli
