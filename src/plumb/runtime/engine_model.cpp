#include "plumb/runtime/engine_model.h"

#include <filesystem>

#include "plumb/model/runner_v3.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

std::int64_t safetensors_bytes(const std::string& dir) {
  std::int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") n += static_cast<std::int64_t>(e.file_size());
  return n;
}

// V4 and V3 have the same shape of API (a loaded model with a ragged-batch forward over its own
// SequenceState / SequenceInput), so one adapter serves both.
template <class Model, class State, class Input>
class RaggedModel final : public EngineModel {
 public:
  RaggedModel(std::unique_ptr<Model> model, std::int64_t weight_bytes)
      : model_(std::move(model)), weight_bytes_(weight_bytes) {}

  std::unique_ptr<Sequence> new_sequence() override {
    auto s = std::make_unique<Seq>();
    s->state = model_->forward().new_sequence();
    return s;
  }

  std::vector<float> forward(std::span<const Chunk> batch) override {
    std::vector<std::vector<int32_t>> ids(batch.size());
    std::vector<Input> inputs(batch.size());
    std::vector<int64_t> wanted;  // batch rows whose logits go back
    int64_t row = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Chunk& c = batch[i];
      if (c.tokens.empty()) fail("engine model: chunk {} of the batch has no tokens", i);
      ids[i].assign(c.tokens.begin(), c.tokens.end());
      inputs[i] = Input{&static_cast<Seq*>(c.seq)->state, ids[i]};
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      if (c.all_logits)
        for (int64_t r = 0; r < n; ++r) wanted.push_back(row + r);
      else if (c.last_logits)
        wanted.push_back(row + n - 1);
      row += n;
    }
    backend::Backend& be = model_->backend();
    backend::Tensor logits = model_->forward().forward(inputs);
    const int64_t vocab = logits.dim(-1), rows = static_cast<int64_t>(wanted.size());
    std::vector<float> out(static_cast<std::size_t>(rows * vocab));
    if (rows == 0) return out;
    if (rows != row) {  // gather the wanted rows on the device before the copy to the host
      backend::Tensor picked = be.full(backend::ElemType::F32, {rows, vocab}, 0.f);
      for (int64_t r = 0; r < rows; ++r) be.copy_rows(picked, r, logits, wanted[r], 1);
      logits = std::move(picked);
    }
    be.to_host(logits, out.data());
    return out;
  }

  const ModelConfig& config() const override { return model_->config(); }
  std::int64_t weight_bytes() const override { return weight_bytes_; }

 private:
  struct Seq final : Sequence {
    State state;
  };
  std::unique_ptr<Model> model_;
  std::int64_t weight_bytes_;
};

}  // namespace

std::unique_ptr<EngineModel> load_engine_model(const std::string& dir, const v4::RunOptions& options) {
  const std::int64_t bytes = safetensors_bytes(dir);
  if (load_model_config(dir).arch == Arch::DeepseekV3)
    return std::make_unique<RaggedModel<v3::ModelV3, v3::SequenceState, v3::SequenceInput>>(
        v3::ModelV3::load(dir, options), bytes);
  return std::make_unique<RaggedModel<v4::ModelV4, v4::SequenceState, v4::SequenceInput>>(
      v4::ModelV4::load(dir, options), bytes);
}

}  // namespace plumb::runtime
