#pragma once
// The startup self-check of the generating commands (--self-check): that the model runs and that
// its decode path agrees with its prefill. Both go through the engine: one request generates `n`
// tokens greedily (the first from the prompt's prefill, the others one decode step each) with the
// logprob of each; a second request scores prompt + those tokens in one prefill (prompt
// logprobs); the logprobs of every generated position must agree within `tolerance`.
#include <span>
#include <vector>

#include "plumb/runtime/engine.h"

namespace plumb::runtime {

struct SelfCheckResult {
  std::vector<TokenId> tokens;   // the greedy continuation
  double max_logprob_diff = 0;   // decode path vs one prefill of the same tokens
  double seconds = 0;
};

// Throws plumb::Error when a request fails (a non-finite logit) or the difference exceeds
// `tolerance` (a NaN difference never passes).
SelfCheckResult self_check(Engine& engine, std::span<const TokenId> prompt, int n, double tolerance = 1e-3);

}  // namespace plumb::runtime
