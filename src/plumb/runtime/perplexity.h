#pragma once
// Perplexity of a token sequence, the way users judge what quantization or KV-precision choices
// cost. Definition (the one HF goldens in tests/data/golden/v4/tiny-kjv/meta.json use): split the
// ids into consecutive non-overlapping windows of `context` tokens (the last one shorter); score
// each window w alone, no cache, as input [BOS] + w, where the logits at input position j predict
// w[j]; sum -log_softmax over all targets in float64; ppl = exp(NLL / N). Every token is a target
// exactly once and BOS never is. Model-agnostic: the model is a function from inputs to the
// logprobs of their tokens (the engine's prompt logprobs, in plumb perplexity).
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "plumb/util/token_id.h"

namespace plumb {

struct PerplexityResult {
  double nll = 0;            // summed negative log-likelihood, nats
  std::int64_t tokens = 0;   // targets scored
  std::int64_t windows = 0;  // windows scored
  double ppl() const { return tokens > 0 ? std::exp(nll / static_cast<double>(tokens)) : 1.0; }
};

// For each input, the log-probability of each of its tokens after the first given the tokens
// before it (log_softmax of position j's logits at input[j + 1]): input length - 1 values.
// Inputs are independent sequences; the function may run them together.
using WindowLogprobsFn = std::function<std::vector<std::vector<float>>(std::span<const std::vector<TokenId>> inputs)>;
// Called after each batch with the totals so far.
using PerplexityProgress = std::function<void(const PerplexityResult& so_far)>;

struct PerplexityOptions {
  std::int64_t context = 256;  // tokens per window, excluding the BOS
  TokenId bos = 0;
  std::int64_t batch = 1;  // windows per call of the logprobs function
};

// Number of windows `tokens` ids make at this context.
std::int64_t window_count(std::int64_t tokens, std::int64_t context);

// Throws plumb::Error on empty ids, a bad option, logprobs of the wrong count or a non-finite NLL.
PerplexityResult perplexity(std::span<const TokenId> ids, const PerplexityOptions& options,
                            const WindowLogprobsFn& logprobs, const PerplexityProgress& progress = {});

}  // namespace plumb
