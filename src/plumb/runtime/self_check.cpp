#include "plumb/runtime/self_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "plumb/runtime/generate_one.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

RequestResult checked(Engine& engine, Request r, const char* what) {
  RequestResult out = generate_one(engine, std::move(r));
  if (out.finish == FinishReason::kError) fail("self-check: the {} failed: {}", what, out.error);
  return out;
}

}  // namespace

SelfCheckResult self_check(Engine& engine, std::span<const TokenId> prompt, int n, double tolerance) {
  if (prompt.empty() || n < 1) fail("self-check needs a prompt and at least one token");
  const auto t0 = std::chrono::steady_clock::now();
  Request decode;
  decode.prompt.assign(prompt.begin(), prompt.end());
  decode.sampling.greedy = true;
  decode.max_tokens = n;
  decode.ignore_eos = true;  // n tokens in any case
  decode.top_logprobs = 0;   // the logprob of each generated token
  const RequestResult generated = checked(engine, decode, "decode request");
  if (generated.tokens.size() != static_cast<std::size_t>(n) || generated.logprobs.size() != generated.tokens.size())
    fail("self-check: the decode request gave {} tokens and {} logprobs, expected {}", generated.tokens.size(),
         generated.logprobs.size(), n);

  Request prefill;
  prefill.prompt = decode.prompt;
  prefill.prompt.insert(prefill.prompt.end(), generated.tokens.begin(), generated.tokens.end());
  prefill.sampling.greedy = true;
  prefill.max_tokens = 1;
  prefill.prompt_logprobs = true;  // row j scores token j + 1
  const RequestResult scored = checked(engine, prefill, "prefill request");
  if (scored.prompt_logprobs.size() + 1 != prefill.prompt.size())
    fail("self-check: {} prompt logprobs for a prompt of {}", scored.prompt_logprobs.size(), prefill.prompt.size());

  SelfCheckResult r;
  r.tokens = generated.tokens;
  for (int i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(generated.logprobs[static_cast<std::size_t>(i)].logprob) -
                              scored.prompt_logprobs[prompt.size() - 1 + static_cast<std::size_t>(i)]);
    r.max_logprob_diff = std::isnan(d) ? d : std::max(r.max_logprob_diff, d);
    if (std::isnan(d)) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!(r.max_logprob_diff <= tolerance))
    fail("self-check failed: decode-step and prefill logprobs differ by {} (tolerance {})", r.max_logprob_diff, tolerance);
  return r;
}

}  // namespace plumb::runtime
