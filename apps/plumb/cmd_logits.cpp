// plumb logits --model DIR --ids IDS.npy --out LOGITS.npy: f32 [T, vocab] logits of one prompt.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "generation_flags.h"
#include "parallel_flags.h"
#include "plumb/format/npy.h"
#include "plumb/model/model.h"
#include "plumb/util/error.h"
#include "plumb/util/finite.h"
#include "plumb/verify/tap_dump.h"

namespace plumb::cli {

namespace {
struct LogitsArgs {
  std::string model, ids, out, numerics = "reference", backend = "cpu", taps;
  int threads = 0;
  ParallelFlags parallel;
};
}  // namespace

Runner register_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Logits for every position of one prompt (one prefill)");
  auto a = std::make_shared<LogitsArgs>();
  cmd->add_option("--model", a->model, "checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--ids", a->ids, "prompt token ids, int32 or int64 .npy of shape [T]")->required();
  cmd->add_option("--out", a->out, "output .npy, float32 [T, vocab]")->required();
  cmd->add_option("--numerics", a->numerics, "reference (f32, what HF computes) or faithful (the release's numerics)")
      ->check(CLI::IsMember({"reference", "faithful"}))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads (0: all)")->check(thread_count())->capture_default_str();
  cmd->add_option("--backend", a->backend, "compute backend")->check(CLI::IsMember(backend_names()))->capture_default_str();
  cmd->add_option("--dump-taps", a->taps, "write named intermediates as DIR/<tap>.npy");
  add_parallel_flags(*cmd, a->parallel);
  return [a]() {
    const std::shared_ptr<dist::Parallel> par = join_layout(a->parallel);
    const std::vector<TokenId> ids = read_token_ids(a->ids);
    check_fits_context(static_cast<int64_t>(ids.size()), load_model_config(a->model), "the prompt (--ids)");
    const std::unique_ptr<Model> model =
        load_model(a->model, {a->backend, a->threads, parse_numerics(a->numerics)}, par);
    // With a layout every rank computes the same logits; rank 0 writes them (and the taps).
    const Taps taps = a->taps.empty() || !writes_output(par.get()) ? Taps() : npy_tap_writer(a->taps);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float> logits = model->prompt_logits(ids, taps);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t T = static_cast<int64_t>(ids.size());
    require_finite(logits, "logits (a NaN or infinity in the weights?)");
    if (!writes_output(par.get())) return 0;
    write_f32_npy(a->out, {T, model->config().vocab_size}, logits.data());
    std::fprintf(stderr, "logits: %lld tokens in %.3f s (%s, %s) -> %s\n", static_cast<long long>(T), s,
                 a->backend.c_str(), a->numerics.c_str(), a->out.c_str());
    return 0;
  };
}

}  // namespace plumb::cli
