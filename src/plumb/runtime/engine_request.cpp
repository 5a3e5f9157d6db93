#include "plumb/runtime/engine_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "plumb/util/error.h"
#include "plumb/util/finite.h"

namespace plumb::runtime {
namespace {

double log_sum_exp(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

}  // namespace

float token_logprob(std::span<const float> logits, std::uint32_t token) {
  return static_cast<float>(logits[token] - log_sum_exp(logits));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n) {
  std::vector<std::uint32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0u);
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](std::uint32_t a, std::uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const double lse = log_sum_exp(logits);
  std::vector<TokenLogprob> out;
  for (std::size_t i = 0; i < k; ++i) out.push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
  return out;
}

OutputVocab::OutputVocab(const Tokenizer* tokenizer, std::size_t rows, std::uint32_t eos)
    : tokenizer_(tokenizer), size_(rows), eos_(eos) {
  if (tokenizer)
    for (std::uint32_t id = 0; id < rows; ++id)
      if (!tokenizer->has_id(id)) unknown_ids_.push_back(id);
}

RequestOutput::RequestOutput(RequestId id, const Request& request, OutputVocab& vocab, std::int64_t max_new)
    : id_(id),
      request_(request),
      vocab_(vocab),
      max_new_(max_new),
      sampler_(request.sampling, vocab.size()),
      sink_([this](std::string_view t) { pending_ += t; }),
      stream_(vocab.tokenizer() ? std::optional<TextStream>(std::in_place, *vocab.tokenizer(), request.stop_strings, sink_, text_)
                                : std::nullopt) {
  if (!vocab.tokenizer() && !request.stop_strings.empty()) fail("request: stop strings need the model's tokenizer");
  sampler_.observe_prompt(request.prompt);
}

bool RequestOutput::wants_prompt_rows() const {
  return request_.prompt_logprobs && prompt_logprobs_.size() + 1 < request_.prompt.size();
}

void RequestOutput::prompt_row(std::int64_t pos, std::span<const float> logits) {
  if (pos != static_cast<std::int64_t>(prompt_logprobs_.size()) || !wants_prompt_rows()) return;
  prompt_logprobs_.push_back(token_logprob(logits, request_.prompt[static_cast<std::size_t>(pos) + 1]));
}

std::uint32_t RequestOutput::pick(std::span<const float> logits) {
  require_finite(logits, "logits (a NaN or infinity in the weights?)");
  // An id without text (a padding row of the head) would end the request at detokenization.
  const std::vector<std::uint32_t>& unknown = vocab_.unknown_ids();
  if (!request_.constraint) return sampler_.sample(logits, unknown);
  const std::size_t n = vocab_.size();
  // Scratch of the sampling thread (the engine samples its sequences side by side), rewritten whole.
  thread_local std::vector<float> masked;
  thread_local std::unique_ptr<bool[]> allowed_rows;
  thread_local std::size_t allowed_size = 0;
  masked.assign(logits.begin(), logits.end());
  for (std::uint32_t id : unknown) masked[id] = -std::numeric_limits<float>::infinity();
  if (allowed_size < n) allowed_rows.reset(new bool[n]), allowed_size = n;
  bool* allowed = allowed_rows.get();
  std::fill(allowed, allowed + n, true);
  for (std::uint32_t id : unknown) allowed[id] = false;
  request_.constraint->mask({allowed, n}, max_new_ - generated());
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (!allowed[i]) masked[i] = -std::numeric_limits<float>::infinity();
    any = any || allowed[i];
  }
  if (!any) fail("the token constraint allows no token");
  const std::uint32_t token = sampler_.sample(masked);
  if (!allowed[token]) fail("sampled id {}, which the token constraint forbids", token);
  request_.constraint->accept(token);
  return token;
}

void RequestOutput::add_logprobs(Event& e, std::span<const float> logits, std::uint32_t token) const {
  if (request_.top_logprobs < 0) return;
  e.logprobs.push_back({token, token_logprob(logits, token)});
  e.top_logprobs.push_back(top_logprobs(logits, request_.top_logprobs));
}

Event RequestOutput::next_token(std::span<const float> logits) {
  if (finished_) fail("request {} already finished", id_);
  if (logits.size() != vocab_.size()) fail("request {}: {} logits, expected the vocabulary's {}", id_, logits.size(), vocab_.size());
  const std::uint32_t token = pick(logits);
  sampler_.observe_generated(token);
  generated_.push_back(token);
  Event e;
  e.id = id_;
  e.tokens.push_back(token);
  add_logprobs(e, logits, token);
  if (!prompt_logprobs_sent_) {
    e.prompt_logprobs = prompt_logprobs_;
    prompt_logprobs_sent_ = true;
  }
  const bool stop_token = (token == vocab_.eos() && !request_.ignore_eos) ||
                          std::find(request_.stop_token_ids.begin(), request_.stop_token_ids.end(), token) !=
                              request_.stop_token_ids.end();
  FinishReason reason = FinishReason::kNone;
  if (stop_token) {
    finish_text();  // the stop token's own text is not delivered
    reason = FinishReason::kStop;
  } else if (push_text(token)) {
    reason = FinishReason::kStop;
  } else if (request_.constraint && request_.constraint->done()) {
    finish_text();
    reason = FinishReason::kStop;
  } else if (generated() == max_new_) {
    reason = finish_text() ? FinishReason::kStop : FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    e.text = std::move(pending_);
    pending_.clear();
    return e;
  }
  return final_event(std::move(e), reason);
}

Event RequestOutput::final_event(Event e, FinishReason reason) {
  e.id = id_;
  e.text += pending_;
  pending_.clear();
  e.final = true;
  e.finish = reason;
  e.prompt_tokens = static_cast<std::int64_t>(request_.prompt.size());
  e.completion_tokens = generated();
  finished_ = true;
  return e;
}

Event RequestOutput::end(FinishReason reason, const std::string& error) {
  Event e;
  e.error = error;
  // Prompt logprobs come complete or not at all (a request cancelled during its prefill has none).
  if (request_.prompt_logprobs && !prompt_logprobs_sent_ && !wants_prompt_rows()) e.prompt_logprobs = prompt_logprobs_;
  pending_.clear();  // held-back text may be the start of a stop string: not delivered
  return final_event(std::move(e), reason);
}

}  // namespace plumb::runtime
