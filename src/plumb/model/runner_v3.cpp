#include "plumb/model/runner_v3.h"

#include "plumb/util/error.h"

namespace plumb::v3 {

std::unique_ptr<ModelV3> ModelV3::load(const std::string& dir, const v4::RunOptions& opt) {
  std::unique_ptr<ModelV3> m(new ModelV3());
  m->cfg_ = load_model_config(dir);
  if (m->cfg_.arch != Arch::DeepseekV3) fail("{}: ModelV3 runs deepseek_v3 checkpoints (got {})", dir, m->cfg_.model_type);
  m->ckpt_ = Checkpoint::open(dir);
  m->weights_ = bind_weights(m->ckpt_, m->cfg_);
  m->be_ = backend::make_backend(opt.backend, opt.threads);
  m->fwd_ = std::make_unique<ForwardV3>(*m->be_, m->cfg_, m->weights_, opt.numerics);
  return m;
}

std::vector<float> ModelV3::run(SequenceState& s, std::span<const int32_t> ids, const Taps& taps) {
  const SequenceInput in{&s, ids};
  const backend::Tensor logits = fwd_->forward({&in, 1}, taps);
  std::vector<float> out(static_cast<std::size_t>(logits.numel()));
  be_->to_host(logits, out.data());
  return out;
}

std::vector<float> ModelV3::prompt_logits(std::span<const int32_t> ids, const Taps& taps) {
  if (ids.empty()) fail("the prompt is empty");
  SequenceState s = fwd_->new_sequence();
  return run(s, ids, taps);
}

std::vector<int32_t> ModelV3::generate(std::span<const int32_t> prompt, const v4::ModelV4::GenerateOptions& g) {
  SequenceState s = fwd_->new_sequence();
  return v4::generate_with(prompt, g, cfg_, [&](std::span<const int32_t> ids) { return run(s, ids); });
}

}  // namespace plumb::v3
