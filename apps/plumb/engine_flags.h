#pragma once
// The serving engine's flags, shared by every command that runs the engine (plumb run, chat,
// generate, perplexity, batch and serve): model loading, the scheduler, the KV pool and the
// prefix cache.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "plumb/model/model.h"
#include "plumb/runtime/local_engine.h"

namespace plumb::cli {

struct EngineFlags {
  std::string model, numerics = "reference", backend = "cpu";
  int threads = 0;
  std::string scheduler = "fcfs";
  std::int64_t max_batch_tokens = 2048, max_seqs = 64, max_chunk_tokens = 0, srpt_max_wait_steps = 256;
  std::int64_t kv_block_size = 256, kv_cache_mb = 0;  // 0: from gpu_memory_fraction (4096 on the CPU)
  double gpu_memory_fraction = 0.9;
  std::string kv_dtype, kv_index_dtype;  // empty: the numerics' lossless default
  std::int64_t kv_bf16_recent = 0;
  std::string prefix_cache = "on";
  // The multi-process layout (set by the commands that take --dp/--tp/--ep), or null.
  std::shared_ptr<dist::Parallel> parallel;
};

// Adds --model and the model flags (--numerics, --backend, --threads) and the engine flags.
void add_engine_flags(CLI::App& cmd, EngineFlags& f);

LoadOptions run_options(const EngineFlags& f);
runtime::EngineOptions engine_options(const EngineFlags& f);  // throws plumb::Error on bad names

struct StartedEngine {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<runtime::Engine> engine;
};
// Under a layout that splits the model (tp x ep > 1), only each model group's lead runs the
// engine: the engine's steps depend on when requests arrive, so ranks running engines of their own
// would not stay in step. On another rank of the group this loads the model, makes the lead's
// model calls until its engine ends (runtime/model_group.h) and returns true: the command then
// returns. False on a lead, and without such a layout.
bool follow_model_group(const EngineFlags& f);

// Loads --model's tokenizer (unless ids_only: requests without text or stop strings, for a
// model directory that may have no tokenizer) and model, prints the engine's memory table on
// stderr (unless quiet) and starts the engine thread; on a model group's lead the model mirrors
// its calls to the group (follow_model_group).
StartedEngine start_engine(const EngineFlags& f, bool quiet, bool ids_only = false);

}  // namespace plumb::cli
