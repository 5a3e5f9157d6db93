#pragma once
// The one model interface: a loaded checkpoint (config, bound weights, a backend, the forward)
// that commands, verify and the serving engine drive without knowing the architecture. Each
// architecture implements it in its own files (model_v4.*, model_v3.*); load_model() picks one
// from config.json's model_type, the only place that switches on the architecture.
//
// A forward call takes a ragged batch: several sequences, each continuing from its own state
// with any number of new tokens, so prefill, chunked prefill, decode and continuous batching are
// one code path. It returns logits only for the rows asked for (the last row of a prompt, for
// generation), so neither the head nor the host copy runs on rows nobody reads.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/dist/parallel.h"
#include "plumb/format/config.h"
#include "plumb/model/numerics.h"
#include "plumb/model/taps.h"
#include "plumb/util/token_id.h"

namespace plumb {

class BlockAllocator;  // model/kv_pool.h

// The KV block ids of one sequence, in position order (model/kv_pool.h). With an owner (the
// model's private allocator) the model grows the list and the ids go back when it is destroyed;
// without one the caller (the serving engine) sets the ids and owns them.
struct SequenceBlocks {
  std::vector<int32_t> ids;
  std::shared_ptr<BlockAllocator> owner;

  SequenceBlocks() = default;
  SequenceBlocks(SequenceBlocks&& o) noexcept;
  SequenceBlocks& operator=(SequenceBlocks&& o) noexcept;
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;
  ~SequenceBlocks();
};

// One sequence's state in a model: what its layers keep of the tokens fed so far (the blocks of
// its paged caches, sliding-window rings, compressor slots). Opaque outside the model that made
// it: each architecture derives its own, and forward() refuses a state of another architecture.
class SequenceState {
 public:
  SequenceState() = default;
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;
  virtual ~SequenceState() = default;
  int64_t pos = 0;  // tokens processed; the next token's position
  SequenceBlocks blocks;
};

// One sequence of a forward batch and its new tokens (at least one).
struct SequenceStep {
  SequenceState* state = nullptr;  // advanced by the call
  std::span<const TokenId> tokens;
  // The length of the sequence's prefill (its prompt); 0: the tokens of a call from position 0
  // are the whole prefill. V4's faithful attention lays out the release's index row by it
  // (backend/index_row.h), so a caller that feeds a prompt in chunks (the serving engine) gives
  // its length to get the rows of one prefill call.
  int64_t prefill = 0;
};

// What one layer keeps per sequence, in f32 values, so that a cache manager can size its pools:
// a fixed part (the sliding-window ring, compressor slots) and one entry per `ratio` tokens.
struct LayerCacheSpec {
  AttnType kind = AttnType::SWA;  // format/config.h
  int64_t window = 0;      // rows of the sliding-window ring (0: none)
  int64_t window_row = 0;  // values per ring row
  int64_t fixed = 0;       // other values held per sequence (compressor slots: kv and score)
  int64_t ratio = 0;       // tokens per cache entry (1: one per token; 0: no growing cache)
  int64_t entry = 0;       // values per cache entry (all of the layer's per-entry tensors)
};

struct CacheSpec {
  std::vector<LayerCacheSpec> layers;
  // Values one sequence holds after `tokens` tokens, summed over layers.
  int64_t values_after(int64_t tokens) const;
};

struct LoadOptions {
  std::string backend = "cpu";
  int threads = 0;  // 0: all hardware threads
  Numerics numerics = Numerics::Reference;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual backend::Backend& backend() = 0;
  // Audit facts for reports (the backend's: device, driver, build targets, reduction order).
  std::vector<std::pair<std::string, std::string>> facts() { return backend().facts(); }
  virtual const CacheSpec& cache_spec() const = 0;
  // The residual-stream tap after each layer, "layer.L.<suffix>" (the one Taps::ReplaceFn may
  // replace): V4's mHC streams "hc", V3's "residual".
  virtual const char* residual_tap_suffix() const = 0;

  // A fresh sequence at position 0.
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Hands the KV block ids to the caller (the serving engine): from now on each sequence's
  // blocks.ids must cover its positions before a forward, with ids below `blocks`, each block
  // `block_size` token positions (kv_pool.h). Sequences made before become unusable.
  virtual void use_external_blocks(int64_t block_size, int64_t blocks) = 0;
  // The storage formats of the paged caches (backend/kv_row.h; default_kv_storage in
  // kv_pool.h until called). Drops the caches' storage: call it before the first forward.
  virtual void set_kv_storage(const backend::KvStorage& storage) = 0;
  // An independent copy of `state` (one of this model's) at a block boundary: both continue
  // alone from its position. The fixed state (rings, compressor slots) is copied, and the cache
  // rows of its positions are copied block by block: from `from_blocks` into `to_blocks` (as
  // many, covering its positions) when the caller owns the ids (use_external_blocks), else
  // (both empty) into blocks of the model's private allocator. The prefix cache keeps such
  // copies. Throws for another model's state or tables that do not cover it.
  virtual std::unique_ptr<SequenceState> fork_sequence(const SequenceState& state,
                                                       std::span<const int32_t> from_blocks = {},
                                                       std::span<const int32_t> to_blocks = {}) = 0;
  // Logits [logit_rows.size(), vocab] (f32) of the batch rows `logit_rows` (ascending indices
  // into the batch's new tokens, sequences stacked in input order; empty: no logits, a tensor of
  // 0 rows). Taps, when enabled, receive the batch's intermediates (rows in the same order;
  // final_norm and logits only for `logit_rows`).
  virtual backend::Tensor forward(std::span<const SequenceStep> batch, std::span<const int64_t> logit_rows,
                                  const Taps& taps = {}) = 0;

  // ---- conveniences over forward() (plumb logits / generate, verify, tests)
  // Logits [T, vocab] for every position of one prompt (one prefill).
  std::vector<float> prompt_logits(std::span<const TokenId> ids, const Taps& taps = {});

  struct GenerateOptions {
    int64_t max_new_tokens = 0;
    bool greedy = true;  // argmax (lowest id on ties); otherwise sample softmax(logits / T)
    double temperature = 1.0;
    uint64_t seed = 0;
    bool stop_at_eos = true;
  };
  // Prefill then 1-token decode steps; returns the new ids (ending with EOS if it was produced).
  std::vector<TokenId> generate(std::span<const TokenId> prompt, const GenerateOptions& g);
};

// Loads the checkpoint in `dir` with the implementation of its architecture.
// With `parallel` (a multi-process layout, dist/parallel.h; null: one process) the model binds
// only this rank's routed experts and splits its layers as the layout says; it keeps `parallel`.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opt,
                                  std::shared_ptr<dist::Parallel> parallel = nullptr);

// The batch rows holding each sequence's last new token (the rows generation needs).
std::vector<int64_t> last_rows(std::span<const SequenceStep> batch);
// Every row of the batch.
std::vector<int64_t> all_rows(std::span<const SequenceStep> batch);

// Copies f32 logits (any shape) to the host.
std::vector<float> to_host_floats(backend::Backend& be, const backend::Tensor& t);

// Index of the largest value, the lowest index among equal maxima (torch.argmax's rule).
int64_t argmax(std::span<const float> v);

}  // namespace plumb
