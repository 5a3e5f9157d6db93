#include "plumb/model/session_v4.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "plumb/util/error.h"

namespace plumb::v4 {

SessionV4::SessionV4(ModelV4& model) : model_(model), state_(model.forward().new_sequence()) {}

std::vector<float> SessionV4::step(std::span<const std::uint32_t> tokens) {
  if (tokens.empty()) fail("a model step needs at least one token");
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int32_t> ids(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= static_cast<std::uint64_t>(vocab))
      fail("token id {} is outside the vocabulary [0, {})", tokens[i], vocab);
    ids[i] = static_cast<int32_t>(tokens[i]);
  }
  const SequenceInput in{&state_, ids};
  const backend::Tensor logits = model_.forward().forward({&in, 1});
  fed_.insert(fed_.end(), tokens.begin(), tokens.end());
  std::vector<float> all(static_cast<std::size_t>(logits.numel()));
  model_.backend().to_host(logits, all.data());
  return std::vector<float>(all.end() - vocab, all.end());  // the last position predicts the next token
}

std::span<const std::uint32_t> SessionV4::resume(std::span<const std::uint32_t> prompt) {
  const bool extends = fed_.size() < prompt.size() && std::equal(fed_.begin(), fed_.end(), prompt.begin());
  if (!extends) reset();
  return prompt.subspan(fed_.size());
}

void SessionV4::reset() {
  state_ = model_.forward().new_sequence();
  fed_.clear();
}

std::vector<std::vector<float>> score_sequences(ModelV4& model, std::span<const std::vector<int32_t>> inputs) {
  std::vector<SequenceState> states;
  std::vector<SequenceInput> batch;
  states.reserve(inputs.size());  // SequenceInput points into it
  for (const auto& in : inputs) {
    if (in.empty()) fail("cannot score an empty sequence");
    batch.push_back({&states.emplace_back(model.forward().new_sequence()), in});
  }
  const backend::Tensor logits = model.forward().forward(batch);
  std::vector<float> all(static_cast<std::size_t>(logits.numel()));
  model.backend().to_host(logits, all.data());
  std::vector<std::vector<float>> out;
  const auto row = static_cast<std::size_t>(model.config().vocab_size);
  std::size_t at = 0;
  for (const auto& in : inputs) {
    out.emplace_back(all.begin() + at, all.begin() + at + in.size() * row);
    at += in.size() * row;
  }
  return out;
}

namespace {

// Largest |a - b|; infinite when either holds a non-finite value.
double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return d;
}

}  // namespace

SelfCheckResult self_check(ModelV4& model, std::span<const std::uint32_t> prompt, int n, double tolerance) {
  if (prompt.empty() || n < 1) fail("self-check needs a prompt and at least one token");
  const auto t0 = std::chrono::steady_clock::now();
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  SessionV4 session(model);
  std::vector<float> decoded;  // the logits of each decode step, stacked
  SelfCheckResult r;
  std::vector<float> logits = session.step(prompt);
  for (int i = 0; i < n; ++i) {
    decoded.insert(decoded.end(), logits.begin(), logits.end());
    r.tokens.push_back(static_cast<std::uint32_t>(argmax(logits)));
    if (i + 1 < n) logits = session.step(std::span(&r.tokens.back(), 1));
  }
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), r.tokens.begin(), r.tokens.end() - 1);
  const std::vector<float> prefill = model.prompt_logits(all);
  const std::size_t first = (prompt.size() - 1) * vocab;  // the position predicting tokens[0]
  r.max_logit_diff = max_abs_diff(decoded, std::span(prefill).subspan(first, decoded.size()));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!(r.max_logit_diff <= tolerance))
    fail("self-check failed: decode-step and prefill logits differ by {} (tolerance {})", r.max_logit_diff, tolerance);
  return r;
}

}  // namespace plumb::v4
