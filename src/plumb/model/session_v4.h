#pragma once
// One growing token sequence on a loaded ModelV4, for streamed generation: step() is the
// StepFn of runtime/generate.h, and the tokens fed so far are remembered so that the next prompt
// of a multi-turn chat can continue from the KV state instead of re-reading the conversation.
// The V4 state (sliding-window rings, compressor slots) cannot be rewound, so continuing is
// possible only when the new prompt extends exactly what was fed; otherwise it starts over.
#include <cstdint>
#include <span>
#include <vector>

#include "plumb/model/runner_v4.h"

namespace plumb::v4 {

class SessionV4 {
 public:
  explicit SessionV4(ModelV4& model);

  // Feeds `tokens` (at least one) and returns the logits predicting the next token [vocab].
  std::vector<float> step(std::span<const std::uint32_t> tokens);

  // Readies the session for the full token sequence `prompt`: returns the part still to feed,
  // which is its tail when what was fed is a proper prefix of it, else all of it after a reset.
  std::span<const std::uint32_t> resume(std::span<const std::uint32_t> prompt);

  void reset();
  const std::vector<std::uint32_t>& fed() const { return fed_; }

 private:
  ModelV4& model_;
  SequenceState state_;
  std::vector<std::uint32_t> fed_;
};

// Logits [length, vocab] (flattened) of each input, every input a fresh sequence; all of them run
// as one ragged batch (perplexity windows).
std::vector<std::vector<float>> score_sequences(ModelV4& model, std::span<const std::vector<int32_t>> inputs);

struct SelfCheckResult {
  std::vector<std::uint32_t> tokens;  // the greedy continuation
  double max_logit_diff = 0;          // decode path vs one prefill of the same tokens
  double seconds = 0;
};

// A startup check that the model runs and that its decode path is consistent: generates `n`
// tokens of `prompt` greedily, one decode step at a time, then scores prompt + tokens in one
// prefill and compares the logits of every generated position. Throws plumb::Error on a
// non-finite logit or a difference above `tolerance`.
SelfCheckResult self_check(ModelV4& model, std::span<const std::uint32_t> prompt, int n, double tolerance = 1e-3);

}  // namespace plumb::v4
