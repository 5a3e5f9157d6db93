#pragma once
// The generation loop behind `plumb run` and `plumb chat`: prefill, then one token per step,
// sampling each step, streaming text as soon as it is complete UTF-8 and cannot be part of a stop
// string, and ending at EOS, a stop string or the token limit. It knows nothing about the model:
// the model is a step function, so tests drive it with fake logits.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/runtime/sampler.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb {

// Feeds tokens to the model (the whole prompt first, then one sampled token per call) and returns
// the logits that predict the next token: one entry per vocabulary id.
using StepFn = std::function<std::vector<float>(std::span<const std::uint32_t> tokens)>;
// Receives text that is safe to print now; called once per non-empty chunk.
using TextSink = std::function<void(std::string_view text)>;

struct GenerationOptions {
  SamplingParams sampling;
  std::int64_t max_new_tokens = 256;
  std::vector<std::string> stop_strings;
  std::optional<std::uint32_t> eos_id;  // generation ends when it is sampled; it is not printed
  // The first `cached` prompt tokens are already in the model's state (a chat continuing its
  // KV cache): only the rest is fed, but penalties still see the whole prompt.
  std::size_t cached = 0;
};

enum class StopReason { kEos, kStopString, kMaxTokens };
const char* to_string(StopReason reason);

struct GenerationResult {
  // Every sampled token, including a final EOS or the token that completed a stop string. All but
  // the last were fed back to the model.
  std::vector<std::uint32_t> tokens;
  std::string text;  // everything sent to the sink
  StopReason reason = StopReason::kMaxTokens;
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;
  double prefill_seconds = 0;  // the first step call (the uncached prompt tokens)
  double decode_seconds = 0;   // the other step calls
  std::int64_t decode_steps = 0;
};

// Runs the loop. `prompt` must hold more than `options.cached` tokens. Throws plumb::Error on bad options, on a
// non-finite logit and on a sampled id the tokenizer does not know.
GenerationResult generate(const StepFn& step, const Tokenizer& tokenizer, std::span<const std::uint32_t> prompt,
                          const GenerationOptions& options, const TextSink& sink);

// "12 prompt tokens (0 cached), 60 generated (eos); prefill 310.5 tok/s (0.039 s), decode 42.0 tok/s (1.403 s)"
std::string stats_line(const GenerationResult& result);

}  // namespace plumb
