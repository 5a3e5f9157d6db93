// plumb generate --model DIR --ids IDS.npy --max-new-tokens N [--greedy] --out-ids OUT.npy
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "generation_flags.h"
#include "plumb/format/npy.h"
#include "plumb/model/model.h"

namespace plumb::cli {

namespace {
struct GenerateArgs {
  std::string model, ids, out, numerics = "reference", backend = "cpu";
  int threads = 0;
  int64_t max_new = 0;
  bool greedy = false, ignore_eos = false;
  double temperature = 1.0;
  uint64_t seed = 0;
};
}  // namespace

Runner register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Continue a prompt: prefill, then one token per decode step");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", a->model, "checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--ids", a->ids, "prompt token ids, int32 or int64 .npy of shape [T]")->required();
  cmd->add_option("--max-new-tokens", a->max_new, "number of tokens to generate")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--out-ids", a->out, "output .npy, int32 [new tokens]")->required();
  cmd->add_flag("--greedy", a->greedy, "argmax decoding (default: sample softmax(logits / temperature))");
  cmd->add_option("--temperature", a->temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--seed", a->seed, "sampling seed")->check(at_least(0))->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating after the end-of-sequence token");
  cmd->add_option("--numerics", a->numerics, "reference or faithful")
      ->check(CLI::IsMember({"reference", "faithful"}))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads (0: all)")->check(thread_count())->capture_default_str();
  cmd->add_option("--backend", a->backend, "compute backend")->check(CLI::IsMember(backend_names()))->capture_default_str();
  return [a]() {
    const std::vector<TokenId> ids = read_token_ids(a->ids);
    check_fits_context(static_cast<int64_t>(ids.size()) + a->max_new, load_model_config(a->model),
                       "the prompt (--ids) + --max-new-tokens");
    const std::unique_ptr<Model> model = load_model(a->model, {a->backend, a->threads, parse_numerics(a->numerics)});
    Model::GenerateOptions g;
    g.max_new_tokens = a->max_new;
    g.greedy = a->greedy;
    g.temperature = a->temperature;
    g.seed = a->seed;
    g.stop_at_eos = !a->ignore_eos;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TokenId> out = model->generate(ids, g);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_npy(a->out, DType::I32, {static_cast<int64_t>(out.size())}, out.data());
    std::fprintf(stderr, "generate: %zu prompt + %zu new tokens in %.3f s -> %s\n", ids.size(), out.size(), s,
                 a->out.c_str());
    return 0;
  };
}

}  // namespace plumb::cli
