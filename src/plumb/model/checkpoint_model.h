#pragma once
// The one implementation of Model: a checkpoint (config, bound weights) on a backend, run by an
// architecture's forward. Each architecture names its parts in a traits type (model_v4.h,
// model_v3.h):
//   Forward       the forward pass (new_sequence(), forward(batch, logit_rows, taps), kv_pool())
//   State         the SequenceState subclass Forward::new_sequence() returns
//   Weights       the bound weights, from bind(Checkpoint, ModelConfig, BindReport* = null)
//   kArch, kName  the architecture it runs and the class name errors use
//   kResidualTap  Model::residual_tap_suffix()
//   cache_spec()  the CacheSpec of a config
//   routed_experts(layer)  a layer's routed expert weights (a parallel layout empties those of
//                 other ranks, so a rank never reads them)
// and a free copy_state(Backend&, const State&) beside State (a deep copy, for fork_sequence).
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "plumb/backend/backend.h"
#include "plumb/convert/source.h"
#include "plumb/convert/tp_rank.h"
#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/binder.h"
#include "plumb/model/model.h"
#include "plumb/util/error.h"

namespace plumb {

template <class Traits>
class CheckpointModel final : public Model {
 public:
  // `parallel`: load_model's (model.h).
  static std::unique_ptr<CheckpointModel> load(const std::string& dir, const LoadOptions& opt,
                                               std::shared_ptr<dist::Parallel> parallel = nullptr) {
    std::unique_ptr<CheckpointModel> m(new CheckpointModel());
    m->cfg_ = load_model_config(dir);
    if (m->cfg_.arch != Traits::kArch)
      fail("{}: {} runs {} checkpoints (got {})", dir, Traits::kName, arch_name(Traits::kArch), m->cfg_.model_type);
    m->par_ = std::move(parallel);
    dist::Parallel* par = m->par_.get();
    if (const auto shards = convert::find_tp_shards(dir)) {
      m->open_tp_shard(dir, *shards, par);
    } else {
      m->ckpt_ = Checkpoint::open(dir);
      m->weights_ = Traits::bind(m->ckpt_, m->cfg_);
    }
    m->cache_ = Traits::cache_spec(m->cfg_);
    m->be_ = backend::make_backend(opt.backend, opt.threads);
    if (par && par->model_size() > 1) {
      if (m->be_->name() != "cpu")
        fail("--tp / --ep ({}) run on the cpu backend; the {} backend's device collectives (NCCL) are not wired "
             "into its ops yet (--dp alone runs on any backend)",
             par->layout().str(), m->be_->name());
      const dist::Range mine = par->experts(m->cfg_.n_routed_experts, dir);
      for (auto& layer : m->weights_.layers) {
        auto& experts = Traits::routed_experts(layer);
        for (std::size_t e = 0; e < experts.size(); ++e)
          if (!mine.contains(static_cast<int64_t>(e))) experts[e] = {};
      }
    }
    m->fwd_ = std::make_unique<typename Traits::Forward>(*m->be_, m->cfg_, m->weights_, opt.numerics, par);
    return m;
  }

  const ModelConfig& config() const override { return cfg_; }
  backend::Backend& backend() override { return *be_; }
  const CacheSpec& cache_spec() const override { return cache_; }
  const char* residual_tap_suffix() const override { return Traits::kResidualTap; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<typename Traits::State>(fwd_->new_sequence());
  }
  void use_external_blocks(int64_t block_size, int64_t blocks) override {
    fwd_->kv_pool().use_external_blocks(block_size, blocks);
  }
  void set_kv_storage(const backend::KvStorage& storage) override { fwd_->kv_pool().set_storage(storage); }
  std::unique_ptr<SequenceState> fork_sequence(const SequenceState& state, std::span<const int32_t> from_blocks,
                                               std::span<const int32_t> to_blocks) override {
    const auto* s = dynamic_cast<const typename Traits::State*>(&state);
    if (!s) fail("{}: cannot fork a sequence state of another model", Traits::kName);
    auto out = std::make_unique<typename Traits::State>(copy_state(*be_, *s));  // the fixed state
    out->blocks = fwd_->kv_pool().fork_blocks(*s, from_blocks, to_blocks);
    return out;
  }
  backend::Tensor forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                          const Taps& taps = {}) override {
    return fwd_->forward(batch, logit_rows, taps);
  }

  // The forward itself, with its concrete sequence states (tests of an architecture's numerics).
  typename Traits::Forward& forward_pass() { return *fwd_; }

 private:
  CheckpointModel() = default;

  // A `plumb convert shard` directory: rank m of the model group opens its file, with the split
  // tensors made whole (convert/tp_rank.h); it holds only its routed experts, so their absence
  // from the others' files is expected, anything else missing is not.
  void open_tp_shard(const std::string& dir, const convert::TpShardSet& set, dist::Parallel* par) {
    const int64_t ranks = par ? par->model_size() : 1;
    if (set.tp != ranks)
      fail("{}: a tensor-parallel split into {} files (plumb convert shard) loads on a layout of tp x ep = {} ranks, "
           "got {} (e.g. mpirun -np {} plumb ... --ep {})",
           dir, set.tp, set.tp, ranks, set.tp, set.tp);
    const int rank = par ? par->model_group().rank() : 0;
    ckpt_ = convert::open_tp_rank(set, rank, cfg_);
    BindReport report;
    weights_ = Traits::bind(ckpt_, cfg_, &report);
    const dist::Range mine = par ? par->experts(cfg_.n_routed_experts, dir) : dist::Range{0, cfg_.n_routed_experts};
    std::erase_if(report.missing, [&](const std::string& name) {
      const auto e = convert::routed_expert_id(name);
      return e && !mine.contains(*e);
    });
    if (!report.ok()) fail("{}: rank {}'s checkpoint does not match its config: {}", dir, rank, report.summary());
  }

  Checkpoint ckpt_;
  ModelConfig cfg_;
  typename Traits::Weights weights_;
  CacheSpec cache_;
  std::unique_ptr<backend::Backend> be_;
  std::shared_ptr<dist::Parallel> par_;  // outlives fwd_, which uses it
  std::unique_ptr<typename Traits::Forward> fwd_;
};

}  // namespace plumb
