#include "plumb/model/model.h"

#include <cmath>
#include <random>

#include "plumb/model/model_v3.h"
#include "plumb/model/model_v4.h"
#include "plumb/util/error.h"
#include "plumb/util/finite.h"

namespace plumb {

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opt,
                                  std::shared_ptr<dist::Parallel> parallel) {
  switch (load_model_config(dir).arch) {  // the one switch on the architecture
    case Arch::DeepseekV4: return v4::ModelV4::load(dir, opt, std::move(parallel));
    case Arch::DeepseekV3: return v3::ModelV3::load(dir, opt, std::move(parallel));
  }
  fail("{}: no model implements this architecture", dir);
}

int64_t CacheSpec::values_after(int64_t tokens) const {
  int64_t n = 0;
  for (const LayerCacheSpec& l : layers) {
    n += l.window * l.window_row + l.fixed;
    if (l.ratio > 0) n += tokens / l.ratio * l.entry;
  }
  return n;
}

std::vector<int64_t> last_rows(std::span<const SequenceStep> batch) {
  std::vector<int64_t> rows;
  int64_t end = 0;
  for (const SequenceStep& s : batch) {
    end += static_cast<int64_t>(s.tokens.size());
    rows.push_back(end - 1);
  }
  return rows;
}

std::vector<int64_t> all_rows(std::span<const SequenceStep> batch) {
  std::vector<int64_t> rows;
  for (const SequenceStep& s : batch)
    for (std::size_t i = 0; i < s.tokens.size(); ++i) rows.push_back(static_cast<int64_t>(rows.size()));
  return rows;
}

std::vector<float> to_host_floats(backend::Backend& be, const backend::Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  be.to_host(t, out.data());
  return out;
}

int64_t argmax(std::span<const float> v) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(v.size()); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

std::vector<float> Model::prompt_logits(std::span<const TokenId> ids, const Taps& taps) {
  if (ids.empty()) fail("the prompt is empty");
  const std::unique_ptr<SequenceState> s = new_sequence();
  const SequenceStep step{s.get(), ids};
  return to_host_floats(backend(), forward({&step, 1}, all_rows({&step, 1}), taps));
}

std::vector<TokenId> Model::generate(std::span<const TokenId> prompt, const GenerateOptions& g) {
  if (prompt.empty()) fail("the prompt is empty");
  if (g.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got {}", g.max_new_tokens);
  if (!g.greedy && !(g.temperature > 0)) fail("temperature must be positive, got {}", g.temperature);
  const std::unique_ptr<SequenceState> s = new_sequence();
  std::mt19937_64 rng(g.seed);
  std::vector<TokenId> out;
  std::vector<TokenId> fed(prompt.begin(), prompt.end());  // the prompt in one step, then one id per step
  while (static_cast<int64_t>(out.size()) < g.max_new_tokens) {
    const SequenceStep step{s.get(), fed};
    const std::vector<int64_t> last = last_rows({&step, 1});  // the last position predicts the next token
    const std::vector<float> logits = to_host_floats(backend(), forward({&step, 1}, last));
    require_finite(logits, fmt::format("generate: step {}: logits (a NaN or infinity in the weights?)", out.size()));
    TokenId next;
    if (g.greedy) {
      next = static_cast<TokenId>(argmax(logits));
    } else {
      const float mx = logits[argmax(logits)];
      std::vector<double> p(logits.size());
      for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp((logits[i] - mx) / g.temperature);
      next = static_cast<TokenId>(std::discrete_distribution<int64_t>(p.begin(), p.end())(rng));
    }
    out.push_back(next);
    if (g.stop_at_eos && static_cast<int64_t>(next) == config().eos_token_id) break;
    fed.assign(1, next);
  }
  return out;
}

}  // namespace plumb
