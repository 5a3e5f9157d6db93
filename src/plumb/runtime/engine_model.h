#pragma once
// Every call the serving engine makes into a model, in one place: load, a fresh sequence state,
// the forward of a ragged batch returning logits only for the rows the step needs, and the facts
// the engine validates requests against. Today it sits over v4::ModelV4 / v3::ModelV3 and their
// ragged-batch forwards (prefill chunks and decode tokens of different sequences in one call give
// the same logits as separate calls); it is the one file to port when the model interface changes.
// The engine's KvBlockManager hands out the block ids; the model's paged caches (model/kv_pool.h)
// store each sequence's entries at the rows those ids name.
// The engine's tests implement it with scripted logits.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plumb/backend/device_facts.h"
#include "plumb/model/model.h"
#include "plumb/runtime/kv_layout.h"

namespace plumb::runtime {

class EngineModel {
 public:
  // One sequence's model state (its caches); advanced by forward().
  class Sequence {
   public:
    virtual ~Sequence() = default;
  };

  struct Chunk {
    Sequence* seq = nullptr;
    std::span<const std::uint32_t> tokens;  // at least one, continuing the sequence
    bool all_logits = false;                // logits of every row (prompt logprobs)
    bool last_logits = false;               // logits of the last row (the next token)
    std::span<const std::int32_t> blocks;   // the sequence's KV block table (KvBlockManager),
                                            // covering every position up to the chunk's last
    std::int64_t prefill = 0;  // the request's prompt length (SequenceStep::prefill: a row's
                               // value does not depend on how the prompt was chunked)
  };

  virtual ~EngineModel() = default;
  virtual std::unique_ptr<Sequence> new_sequence() = 0;
  // Once, before the first sequence: the KV block ids come from the engine's KvBlockManager
  // (blocks of `block_size` token positions, ids below `blocks`), and name the model's storage,
  // which holds its entries and indexer keys in `format` (kv_layout.h).
  virtual void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat& format) = 0;
  // An independent copy of `seq` as it is now, at a block boundary (a prefix-cache snapshot, or
  // a sequence started from one; prefix_cache.h): forward() may advance either without changing
  // the other. The cache rows of the positions `from_blocks` cover (KvBlockManager ids, whole
  // blocks) are copied into the copy's `to_blocks` (as many), and the fixed state (sliding-window
  // rings, compressor slots) is copied.
  virtual std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from_blocks,
                                         std::span<const std::int32_t> to_blocks) = 0;
  // Runs the batch as one step. Returns the wanted rows' logits, [rows, vocab] flattened, in
  // chunk order: every row of an all_logits chunk, else the last row of a last_logits chunk.
  virtual std::vector<float> forward(std::span<const Chunk> batch) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual std::int64_t weight_bytes() const = 0;  // checkpoint bytes, for the memory table
  // What the backend holds (backend::device_memory); called on the engine thread only.
  virtual backend::DeviceMemory device_memory() const { return {}; }
  std::int64_t vocab_size() const { return config().vocab_size; }
  std::int64_t max_context() const { return config().max_position_embeddings; }
  std::uint32_t eos_id() const { return static_cast<std::uint32_t>(config().eos_token_id); }
};

// Loads a deepseek_v4 or deepseek_v3 checkpoint directory (dispatch on config.json model_type).
std::unique_ptr<EngineModel> load_engine_model(const std::string& dir, const LoadOptions& options,
                                               std::shared_ptr<dist::Parallel> parallel = nullptr);

}  // namespace plumb::runtime
