#pragma once
// The engine in this process: runtime::Engine over an EngineModel, with one engine thread that
// owns the model and runs steps (schedule -> one ragged forward -> sample each completing
// sequence -> events) while there is work, and sleeps otherwise.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "plumb/runtime/engine.h"
#include "plumb/runtime/engine_model.h"
#include "plumb/runtime/kv_layout.h"
#include "plumb/runtime/scheduler.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::runtime {

struct EngineOptions {
  SchedulerConfig scheduler;
  std::int64_t kv_block_size = 256;     // native token positions per block (a multiple of 128)
  // The KV storage formats; unset: the numerics' lossless default (default_kv_format).
  std::optional<KvDtype> kv_dtype;
  std::optional<IndexKeyDtype> kv_index_dtype;
  std::int64_t kv_bf16_recent = 0;      // entries covering the last N positions read in bf16 (V4)
  bool faithful = false;                // the numerics the model runs in (for the default format)
  // The KV pool and the per-sequence state in MiB; 0: sized by kv_budget (kv_budget.h) from the
  // device's free memory times gpu_memory_fraction (4096 MiB on the host).
  std::int64_t kv_cache_mib = 0;
  double gpu_memory_fraction = 0.9;
  std::int64_t kv_blocks = 0;           // > 0: the pool's size in blocks instead (tests, benchmarks)
  bool prefix_cache = true;             // reuse snapshots of earlier prompts' states (prefix_cache.h)
  // Threads that sample a step's sequences side by side (at V4's vocabulary a draw is a pass or
  // more over 129,280 logits per sequence); 0: min(8, hardware threads); 1: the engine thread.
  int sampling_threads = 0;
};

// Starts the engine thread. Without a tokenizer (null) requests are ids only: events carry no
// text and stop strings are refused. Throws plumb::Error on bad options (a block size that is not
// a multiple of 128, a pool that cannot hold max_seqs sequences' state).
std::unique_ptr<Engine> start_engine(std::unique_ptr<EngineModel> model, std::shared_ptr<const Tokenizer> tokenizer,
                                     const EngineOptions& options);

// The start-up memory table of an engine with these options over this model (what start_engine
// sizes the pool by).
std::string engine_memory_table(const EngineModel& model, const EngineOptions& options);

}  // namespace plumb::runtime
