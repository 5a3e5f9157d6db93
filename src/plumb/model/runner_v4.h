#pragma once
// A loaded DeepSeek-V4 model ready to run: checkpoint, config, bound weights, a backend and the
// forward. What the CLI (plumb logits / generate) and the end-to-end tests use.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/forward_v4.h"
#include "plumb/model/numerics.h"
#include "plumb/model/weights_v4.h"

namespace plumb::v4 {

struct RunOptions {
  std::string backend = "cpu";
  int threads = 0;  // 0: all hardware threads
  Numerics numerics = Numerics::Reference;
};

class ModelV4 {
 public:
  static std::unique_ptr<ModelV4> load(const std::string& dir, const RunOptions& opt);

  const ModelConfig& config() const { return cfg_; }
  ForwardV4& forward() { return *fwd_; }
  backend::Backend& backend() { return *be_; }

  // Logits [T, vocab] for every position of one prompt (one prefill).
  std::vector<float> prompt_logits(std::span<const int32_t> ids, const Taps& taps = {});

  struct GenerateOptions {
    int64_t max_new_tokens = 0;
    bool greedy = true;   // argmax (lowest id on ties); otherwise sample softmax(logits / T)
    double temperature = 1.0;
    uint64_t seed = 0;
    bool stop_at_eos = true;
  };
  // Prefill then 1-token decode steps; returns the new ids (ending with EOS if it was produced).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, const GenerateOptions& g);

 private:
  ModelV4() = default;
  Checkpoint ckpt_;
  ModelConfig cfg_;
  ModelWeights weights_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<ForwardV4> fwd_;
};

// Index of the largest value, the lowest index among equal maxima (torch.argmax's rule).
int64_t argmax(std::span<const float> v);

// The decode loop shared by the V4 and V3 runners: `step` feeds new ids to one sequence and
// returns their logits [n, vocab]; the prompt goes in one step, then one id per step.
std::vector<int32_t> generate_with(std::span<const int32_t> prompt, const ModelV4::GenerateOptions& g,
                                   const ModelConfig& cfg,
                                   const std::function<std::vector<float>(std::span<const int32_t>)>& step);

}  // namespace plumb::v4
