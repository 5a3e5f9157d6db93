#pragma once
// One growing token sequence on a loaded Model, for streamed generation: step() is the StepFn of
// runtime/generate.h, and the tokens fed so far are remembered so that the next prompt of a
// multi-turn chat can continue from the KV state instead of re-reading the conversation. A
// sequence state cannot be rewound (V4's sliding-window rings and compressor slots), so
// continuing is possible only when the new prompt extends exactly what was fed; otherwise it
// starts over. (The serving engine, issue 15, replaces this.)
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "plumb/model/model.h"

namespace plumb {

class Session {
 public:
  explicit Session(Model& model);

  // Feeds `tokens` (at least one) and returns the logits predicting the next token [vocab].
  std::vector<float> step(std::span<const TokenId> tokens);

  // Readies the session for the full token sequence `prompt`: returns the part still to feed,
  // which is its tail when what was fed is a proper prefix of it, else all of it after a reset.
  std::span<const TokenId> resume(std::span<const TokenId> prompt);

  void reset();
  const std::vector<TokenId>& fed() const { return fed_; }

 private:
  Model& model_;
  std::unique_ptr<SequenceState> state_;
  std::vector<TokenId> fed_;
};

// For each input, every fresh sequence, the logits [length - 1, vocab] (flattened) of all its
// positions but the last (the ones that predict a token of the input); all of them run as one
// ragged batch (perplexity windows).
std::vector<std::vector<float>> score_sequences(Model& model, std::span<const std::vector<TokenId>> inputs);

struct SelfCheckResult {
  std::vector<TokenId> tokens;  // the greedy continuation
  double max_logit_diff = 0;    // decode path vs one prefill of the same tokens
  double seconds = 0;
};

// A startup check that the model runs and that its decode path is consistent: generates `n`
// tokens of `prompt` greedily, one decode step at a time, then scores prompt + tokens in one
// prefill and compares the logits of every generated position. Throws plumb::Error on a
// non-finite logit or a difference above `tolerance`.
SelfCheckResult self_check(Model& model, std::span<const TokenId> prompt, int n, double tolerance = 1e-3);

}  // namespace plumb
