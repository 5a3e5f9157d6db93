// plumb synth --config CONFIG --out DIR: a random checkpoint in the official V4 layout.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "plumb/model/synth_v4.h"
#include "plumb/util/progress.h"

namespace plumb::cli {

Runner register_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a random DeepSeek-V4 checkpoint in the official layout");
  auto o = std::make_shared<v4::SynthOptions>();
  cmd->add_option("--config", o->config_path, "config.json (deepseek_v4) or a directory holding one")->required();
  cmd->add_option("--out", o->out_dir, "output checkpoint directory")->required();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_flag("--fp8-experts", o->fp8_experts, "routed experts as FP8 e4m3 128x128 (V4-Base style) instead of FP4");
  cmd->add_flag("!--no-mtp", o->with_mtp, "omit the mtp.* tensors");
  cmd->add_flag("--force", o->force, "overwrite DIR if it exists");
  return [o]() {
    const v4::SynthResult r = v4::synthesize_checkpoint(*o);
    std::printf("wrote %s: %lld tensors, %lld shards, %s\n", o->out_dir.c_str(), static_cast<long long>(r.tensors),
                static_cast<long long>(r.shards), format_bytes(r.bytes).c_str());
    return 0;
  };
}

}  // namespace plumb::cli
