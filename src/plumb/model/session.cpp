#include "plumb/model/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "plumb/util/error.h"

namespace plumb {

Session::Session(Model& model) : model_(model), state_(model.new_sequence()) {}

std::vector<float> Session::step(std::span<const TokenId> tokens) {
  if (tokens.empty()) fail("a model step needs at least one token");
  const SequenceStep in{state_.get(), tokens};
  const std::vector<int64_t> last = last_rows({&in, 1});  // the last position predicts the next token
  std::vector<float> logits = to_host_floats(model_.backend(), model_.forward({&in, 1}, last));
  fed_.insert(fed_.end(), tokens.begin(), tokens.end());
  return logits;
}

std::span<const TokenId> Session::resume(std::span<const TokenId> prompt) {
  const bool extends = fed_.size() < prompt.size() && std::equal(fed_.begin(), fed_.end(), prompt.begin());
  if (!extends) reset();
  return prompt.subspan(fed_.size());
}

void Session::reset() {
  state_ = model_.new_sequence();
  fed_.clear();
}

std::vector<std::vector<float>> score_sequences(Model& model, std::span<const std::vector<TokenId>> inputs) {
  std::vector<std::unique_ptr<SequenceState>> states;
  std::vector<SequenceStep> batch;
  std::vector<int64_t> rows;  // every row but each input's last
  for (const auto& in : inputs) {
    if (in.empty()) fail("cannot score an empty sequence");
    const auto start = static_cast<int64_t>(rows.size() + batch.size());
    for (std::size_t j = 0; j + 1 < in.size(); ++j) rows.push_back(start + static_cast<int64_t>(j));
    batch.push_back({states.emplace_back(model.new_sequence()).get(), in});
  }
  const std::vector<float> all = to_host_floats(model.backend(), model.forward(batch, rows));
  std::vector<std::vector<float>> out;
  const auto row = static_cast<std::size_t>(model.config().vocab_size);
  std::size_t at = 0;
  for (const auto& in : inputs) {
    out.emplace_back(all.begin() + at, all.begin() + at + (in.size() - 1) * row);
    at += (in.size() - 1) * row;
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

SelfCheckResult self_check(Model& model, std::span<const TokenId> prompt, int n, double tolerance) {
  if (prompt.empty() || n < 1) fail("self-check needs a prompt and at least one token");
  const auto t0 = std::chrono::steady_clock::now();
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  Session session(model);
  std::vector<float> decoded;  // the logits of each decode step, stacked
  SelfCheckResult r;
  std::vector<float> logits = session.step(prompt);
  for (int i = 0; i < n; ++i) {
    decoded.insert(decoded.end(), logits.begin(), logits.end());
    r.tokens.push_back(static_cast<TokenId>(argmax(logits)));
    if (i + 1 < n) logits = session.step(std::span(&r.tokens.back(), 1));
  }
  std::vector<TokenId> all(prompt.begin(), prompt.end());
  all.insert(all.end(), r.tokens.begin(), r.tokens.end() - 1);
  const std::vector<float> prefill = model.prompt_logits(all);
  const std::size_t first = (prompt.size() - 1) * vocab;  // the position predicting tokens[0]
  r.max_logit_diff = max_abs_diff(decoded, std::span(prefill).subspan(first, decoded.size()));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!(r.max_logit_diff <= tolerance))
    fail("self-check failed: decode-step and prefill logits differ by {} (tolerance {})", r.max_logit_diff, tolerance);
  return r;
}

}  // namespace plumb
