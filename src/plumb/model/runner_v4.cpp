#include "plumb/model/runner_v4.h"

#include <cmath>
#include <random>

#include "plumb/util/error.h"
#include "plumb/util/finite.h"

namespace plumb::v4 {

int64_t argmax(std::span<const float> v) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(v.size()); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

std::unique_ptr<ModelV4> ModelV4::load(const std::string& dir, const RunOptions& opt) {
  std::unique_ptr<ModelV4> m(new ModelV4());
  m->cfg_ = load_model_config(dir);
  if (m->cfg_.arch != Arch::DeepseekV4) fail("{}: ModelV4 runs deepseek_v4 checkpoints (got {}; see ModelV3)", dir, m->cfg_.model_type);
  m->ckpt_ = Checkpoint::open(dir);
  m->weights_ = bind_weights(m->ckpt_, m->cfg_);
  m->be_ = backend::make_backend(opt.backend, opt.threads);
  m->fwd_ = std::make_unique<ForwardV4>(*m->be_, m->cfg_, m->weights_, opt.numerics);
  return m;
}

std::vector<float> ModelV4::prompt_logits(std::span<const int32_t> ids, const Taps& taps) {
  if (ids.empty()) fail("the prompt is empty");
  SequenceState s = fwd_->new_sequence();
  const SequenceInput in{&s, ids};
  const backend::Tensor logits = fwd_->forward({&in, 1}, taps);
  std::vector<float> out(static_cast<std::size_t>(logits.numel()));
  be_->to_host(logits, out.data());
  return out;
}

std::vector<int32_t> ModelV4::generate(std::span<const int32_t> prompt, const GenerateOptions& g) {
  SequenceState s = fwd_->new_sequence();
  return generate_with(prompt, g, cfg_, [&](std::span<const int32_t> ids) {
    const SequenceInput in{&s, ids};
    const backend::Tensor logits = fwd_->forward({&in, 1});
    std::vector<float> all(static_cast<std::size_t>(logits.numel()));
    be_->to_host(logits, all.data());
    return all;
  });
}

std::vector<int32_t> generate_with(std::span<const int32_t> prompt, const ModelV4::GenerateOptions& g,
                                   const ModelConfig& cfg,
                                   const std::function<std::vector<float>(std::span<const int32_t>)>& step_fn) {
  if (prompt.empty()) fail("the prompt is empty");
  if (g.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got {}", g.max_new_tokens);
  if (!g.greedy && !(g.temperature > 0)) fail("temperature must be positive, got {}", g.temperature);
  const int64_t V = cfg.vocab_size;
  std::mt19937_64 rng(g.seed);
  std::vector<int32_t> out;
  std::vector<float> last(static_cast<std::size_t>(V));
  std::vector<int32_t> step(prompt.begin(), prompt.end());
  while (static_cast<int64_t>(out.size()) < g.max_new_tokens) {
    const std::vector<float> all = step_fn(step);
    std::copy(all.end() - V, all.end(), last.begin());  // the last position predicts the next token
    require_finite(last, fmt::format("generate: step {}: logits (a NaN or infinity in the weights?)", out.size()));
    int32_t next;
    if (g.greedy) {
      next = static_cast<int32_t>(argmax(last));
    } else {
      const float mx = last[argmax(last)];
      std::vector<double> p(last.size());
      for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp((last[i] - mx) / g.temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int64_t>(p.begin(), p.end())(rng));
    }
    out.push_back(next);
    if (g.stop_at_eos && next == cfg.eos_token_id) break;
    step.assign(1, next);
  }
  return out;
}

}  // namespace plumb::v4
