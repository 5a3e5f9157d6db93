#include "plumb/runtime/perplexity.h"

#include <algorithm>

#include "plumb/util/error.h"

namespace plumb {
namespace {

// The NLL of window `w` from the logprobs of its input [BOS] + w (one per token of w).
double window_nll(std::span<const TokenId> w, std::span<const float> logprobs, std::int64_t window_index) {
  if (logprobs.size() != w.size())
    fail("window {}: got {} logprobs for {} targets", window_index, logprobs.size(), w.size());
  double nll = 0;
  for (std::size_t j = 0; j < w.size(); ++j) {
    const double v = -static_cast<double>(logprobs[j]);
    if (!std::isfinite(v)) fail("window {}, position {}: the NLL is not finite ({})", window_index, j, v);
    nll += v;
  }
  return nll;
}

}  // namespace

std::int64_t window_count(std::int64_t tokens, std::int64_t context) { return (tokens + context - 1) / context; }

PerplexityResult perplexity(std::span<const TokenId> ids, const PerplexityOptions& o, const WindowLogprobsFn& logprobs,
                            const PerplexityProgress& progress) {
  if (ids.empty()) fail("no tokens to score");
  if (o.context < 1) fail("context must be at least 1, got {}", o.context);
  if (o.batch < 1) fail("batch must be at least 1, got {}", o.batch);
  const auto n = static_cast<std::int64_t>(ids.size());
  PerplexityResult r;
  while (r.tokens < n) {
    std::vector<std::vector<TokenId>> inputs;
    for (std::int64_t t = r.tokens; t < n && static_cast<std::int64_t>(inputs.size()) < o.batch; t += o.context) {
      const auto w = ids.subspan(static_cast<std::size_t>(t), static_cast<std::size_t>(std::min(o.context, n - t)));
      std::vector<TokenId>& in = inputs.emplace_back(1, o.bos);
      in.insert(in.end(), w.begin(), w.end());
    }
    const std::vector<std::vector<float>> out = logprobs(inputs);
    if (out.size() != inputs.size()) fail("got logprobs for {} of {} windows", out.size(), inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      r.nll += window_nll(std::span(inputs[i]).subspan(1), out[i], r.windows);
      r.tokens += static_cast<std::int64_t>(inputs[i].size()) - 1;
      ++r.windows;
    }
    if (progress) progress(r);
  }
  return r;
}

}  // namespace plumb
