#include "plumb/runtime/engine_model.h"

#include <filesystem>

#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

std::int64_t safetensors_bytes(const std::string& dir) {
  std::int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") n += static_cast<std::int64_t>(e.file_size());
  return n;
}

// Every architecture behind model/model.h: its forward takes the batch and the rows whose
// logits the step needs.
class LoadedModel final : public EngineModel {
 public:
  LoadedModel(std::unique_ptr<Model> model, std::int64_t weight_bytes)
      : model_(std::move(model)), weight_bytes_(weight_bytes) {}

  std::unique_ptr<Sequence> new_sequence() override {
    auto s = std::make_unique<Seq>();
    s->state = model_->new_sequence();
    return s;
  }

  void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat& format) override {
    model_->set_kv_storage(kv_storage(format));
    model_->use_external_blocks(block_size, blocks);
  }

  std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from_blocks,
                                 std::span<const std::int32_t> to_blocks) override {
    auto s = std::make_unique<Seq>();
    s->state = model_->fork_sequence(*static_cast<const Seq&>(seq).state, from_blocks, to_blocks);
    return s;
  }

  std::vector<float> forward(std::span<const Chunk> batch) override {
    std::vector<SequenceStep> steps(batch.size());
    std::vector<int64_t> wanted;  // batch rows whose logits go back
    int64_t row = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Chunk& c = batch[i];
      if (c.tokens.empty()) fail("engine model: chunk {} of the batch has no tokens", i);
      SequenceState* state = static_cast<Seq*>(c.seq)->state.get();
      state->blocks.ids.assign(c.blocks.begin(), c.blocks.end());
      steps[i] = SequenceStep{state, c.tokens, c.prefill};
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      if (c.all_logits)
        for (int64_t r = 0; r < n; ++r) wanted.push_back(row + r);
      else if (c.last_logits)
        wanted.push_back(row + n - 1);
      row += n;
    }
    if (wanted.empty() && row == 0) return {};
    return to_host_floats(model_->backend(), model_->forward(steps, wanted));
  }

  const ModelConfig& config() const override { return model_->config(); }
  std::int64_t weight_bytes() const override { return weight_bytes_; }
  backend::DeviceMemory device_memory() const override { return backend::device_memory(model_->backend()); }

 private:
  struct Seq final : Sequence {
    std::unique_ptr<SequenceState> state;
  };
  std::unique_ptr<Model> model_;
  std::int64_t weight_bytes_;
};

}  // namespace

std::unique_ptr<EngineModel> load_engine_model(const std::string& dir, const LoadOptions& options,
                                               std::shared_ptr<dist::Parallel> parallel) {
  return std::make_unique<LoadedModel>(load_model(dir, options, std::move(parallel)), safetensors_bytes(dir));
}

}  // namespace plumb::runtime
