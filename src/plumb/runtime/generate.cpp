#include "plumb/runtime/generate.h"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "plumb/runtime/text_stream.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using Clock = std::chrono::steady_clock;

// Calls `step` and checks its logits: a NaN or infinity means a broken model or kernel, and
// sampling from it would print plausible-looking garbage.
std::vector<float> checked_step(const StepFn& step, std::span<const std::uint32_t> tokens, std::int64_t index,
                                double& seconds) {
  const auto t0 = Clock::now();
  std::vector<float> logits = step(tokens);
  seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (logits.empty()) fail("step {}: the model returned no logits", index);
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      fail("step {}: the model produced a non-finite logit ({}) for id {}", index, logits[i], i);
  return logits;
}

}  // namespace

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kStopString: return "stop string";
    case StopReason::kMaxTokens: return "max tokens";
  }
  return "?";
}

GenerationResult generate(const StepFn& step, const Tokenizer& tokenizer, std::span<const std::uint32_t> prompt,
                          const GenerationOptions& options, const TextSink& sink) {
  if (prompt.empty()) fail("the prompt is empty");
  if (options.cached >= prompt.size())
    fail("{} of {} prompt tokens are cached: nothing to feed", options.cached, prompt.size());
  if (options.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got {}", options.max_new_tokens);
  validate(options.sampling);
  GenerationResult r;
  r.prompt_tokens = prompt.size();
  r.cached_tokens = options.cached;
  if (options.max_new_tokens == 0) return r;

  std::vector<float> logits = checked_step(step, prompt.subspan(options.cached), 0, r.prefill_seconds);
  Sampler sampler(options.sampling, logits.size());
  sampler.observe_prompt(prompt);
  TextStream stream(tokenizer, options.stop_strings, sink, r.text);
  for (;;) {
    const std::uint32_t token = sampler.sample(logits);
    sampler.observe_generated(token);
    r.tokens.push_back(token);
    if (token == options.eos_id) {
      r.reason = stream.finish() ? StopReason::kStopString : StopReason::kEos;
      return r;
    }
    if (stream.push(token)) {
      r.reason = StopReason::kStopString;
      return r;
    }
    if (static_cast<std::int64_t>(r.tokens.size()) == options.max_new_tokens) {
      r.reason = stream.finish() ? StopReason::kStopString : StopReason::kMaxTokens;
      return r;
    }
    logits = checked_step(step, std::span(&token, 1), ++r.decode_steps, r.decode_seconds);
  }
}

std::string stats_line(const GenerationResult& r) {
  auto rate = [](double n, double s) { return s > 0 ? fmt::format("{:.1f} tok/s", n / s) : std::string("-"); };
  return fmt::format("{} prompt tokens ({} cached), {} generated ({}); prefill {} ({:.3f} s), decode {} ({:.3f} s)",
                     r.prompt_tokens, r.cached_tokens, r.tokens.size(), to_string(r.reason),
                     rate(static_cast<double>(r.prompt_tokens - r.cached_tokens), r.prefill_seconds), r.prefill_seconds,
                     rate(r.decode_steps, r.decode_seconds), r.decode_seconds);
}

}  // namespace plumb
