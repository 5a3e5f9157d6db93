#include "engine_flags.h"

#include <csignal>
#include <cstdio>

#include "commands.h"
#include "generation_flags.h"
#include "plumb/runtime/model_group.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::cli {

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--model", f.model, "model directory (config.json, safetensors, tokenizer.json)")->required();
  cmd.add_option("--numerics", f.numerics, "reference or faithful")
      ->check(CLI::IsMember({"reference", "faithful"}))
      ->capture_default_str();
  cmd.add_option("--backend", f.backend, "compute backend")->check(CLI::IsMember(backend_names()))->capture_default_str();
  cmd.add_option("--threads", f.threads, "CPU threads for the CPU backend and for sampling (0: all, at most 8 sampling)")->check(thread_count())->capture_default_str();
  cmd.add_option("--scheduler", f.scheduler, "admission order: fcfs, or srpt (shortest remaining work, with aging)")
      ->check(CLI::IsMember({"fcfs", "srpt"}))
      ->capture_default_str();
  cmd.add_option("--srpt-max-wait-steps", f.srpt_max_wait_steps,
                 "srpt: a request waiting this many steps goes ahead of all that waited less")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--max-batch-tokens", f.max_batch_tokens, "tokens per engine step (decode tokens + prefill chunks)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--max-seqs", f.max_seqs, "sequences running at once")->check(at_least(1))->capture_default_str();
  cmd.add_option("--max-chunk-tokens", f.max_chunk_tokens, "largest prefill chunk of one sequence (0: the step's budget)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--kv-block-size", f.kv_block_size, "token positions per KV block (a multiple of 128)")
      ->check(at_least(128))
      ->capture_default_str();
  cmd.add_option("--kv-cache-mb", f.kv_cache_mb,
                 "MiB for the KV pool and the per-sequence state; 0: --gpu-memory-fraction of the GPU's free memory "
                 "less the weights and a workspace reserve (4096 on the CPU backend)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--gpu-memory-fraction", f.gpu_memory_fraction,
                 "share of the GPU memory free at start that plumb may take (weights, workspace and the KV pool) "
                 "when --kv-cache-mb is 0")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--kv-dtype", f.kv_dtype,
                 "KV entry storage: f32, bf16, or fp8 (e4m3 nope dims, ue8m0 scale per 64, bf16 rope dims); default: "
                 "fp8 under faithful numerics (V4; bf16 for V3), f32 under reference (both lossless)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd.add_option("--kv-index-dtype", f.kv_index_dtype,
                 "indexer key storage: f32, bf16, or fp4 (e2m1, ue8m0 scale per 32); default: fp4 under faithful "
                 "numerics, f32 under reference")
      ->check(CLI::IsMember({"f32", "bf16", "fp4"}));
  cmd.add_option("--kv-bf16-recent", f.kv_bf16_recent,
                 "V4: compressed entries covering the last N positions of each query are read in bf16 (a per-sequence "
                 "ring of N/ratio + 1 entries per compressed layer) instead of the --kv-dtype storage; 0: none")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--prefix-cache", f.prefix_cache,
                 "on: a prompt that starts with an earlier one's tokens continues from a snapshot of its state at a KV "
                 "block boundary (results are bitwise the same); off: every prompt is read from its start")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

LoadOptions run_options(const EngineFlags& f) { return {f.backend, f.threads, parse_numerics(f.numerics)}; }

runtime::EngineOptions engine_options(const EngineFlags& f) {
  runtime::EngineOptions o;
  o.scheduler.policy = runtime::parse_schedule_policy(f.scheduler);
  o.scheduler.max_batch_tokens = f.max_batch_tokens;
  o.scheduler.max_seqs = f.max_seqs;
  o.scheduler.max_chunk_tokens = f.max_chunk_tokens;
  o.scheduler.srpt_max_wait_steps = f.srpt_max_wait_steps;
  o.kv_block_size = f.kv_block_size;
  o.kv_cache_mib = f.kv_cache_mb;
  o.gpu_memory_fraction = f.gpu_memory_fraction;
  o.prefix_cache = f.prefix_cache == "on";
  o.faithful = parse_numerics(f.numerics) == Numerics::Faithful;
  if (!f.kv_dtype.empty()) o.kv_dtype = runtime::parse_kv_dtype(f.kv_dtype);
  if (!f.kv_index_dtype.empty()) o.kv_index_dtype = runtime::parse_index_key_dtype(f.kv_index_dtype);
  o.kv_bf16_recent = f.kv_bf16_recent;
  o.sampling_threads = f.threads;  // --threads caps the sampling threads too (0: automatic)
  return o;
}

bool follow_model_group(const EngineFlags& f) {
  if (!f.parallel || f.parallel->model_size() == 1 || f.parallel->leads_model_group()) return false;
  // mpirun passes SIGTERM / SIGINT to every rank: the lead ends its engine (plumb serve drains its
  // requests first), which ends this rank.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const auto model = runtime::load_engine_model(f.model, run_options(f), f.parallel);
  runtime::follow_model_group(*model, f.parallel->model_group());
  return true;
}

StartedEngine start_engine(const EngineFlags& f, bool quiet, bool ids_only) {
  const runtime::EngineOptions options = engine_options(f);
  StartedEngine s;
  if (!ids_only) s.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(f.model));
  auto model = runtime::load_engine_model(f.model, run_options(f), f.parallel);
  if (f.parallel && f.parallel->model_size() > 1) model = runtime::lead_model_group(std::move(model), f.parallel->model_group());
  if (!quiet) std::fputs(runtime::engine_memory_table(*model, options).c_str(), stderr);
  s.engine = runtime::start_engine(std::move(model), s.tokenizer, options);
  return s;
}

}  // namespace plumb::cli
