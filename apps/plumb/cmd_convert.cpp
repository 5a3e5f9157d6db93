// plumb convert cast|experts|shard SRC DST: offline checkpoint conversions (src/plumb/convert).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "generation_flags.h"
#include "plumb/convert/convert.h"

namespace plumb::cli {
namespace {

struct ConvertArgs {
  std::string to;
  convert::CastOptions cast;
  convert::ExpertsOptions experts;
  convert::ShardOptions shard;
  bool no_progress = false;
};

// SRC, DST, --force and --no-progress, the same on every conversion.
void add_io(CLI::App* cmd, std::string& src, convert::ConvertOutput& out, bool& no_progress) {
  cmd->add_option("SRC", src, "source checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("DST", out.dst, "output directory (written as DST.tmp-<pid>, renamed when complete)")->required();
  cmd->add_flag("--force", out.force, "replace DST if it exists (only once the new one is complete)");
  cmd->add_flag("--no-progress", no_progress, "no progress bar");
}

int finish(convert::ConvertReport r) {
  std::printf("%s", convert::report_text(r).c_str());
  return 0;
}

}  // namespace

Runner register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Offline checkpoint conversions: cast, experts, shard");
  cmd->require_subcommand(1);
  auto a = std::make_shared<ConvertArgs>();

  auto* cast = cmd->add_subcommand("cast", "Dequantize FP8 weights (and with --experts FP4 experts) to BF16");
  cast->add_option("--to", a->to, "target dtype")->required()->check(CLI::IsMember({"bf16"}));
  cast->add_flag("--experts", a->cast.experts, "also dequantize the FP4 routed experts (else copied unchanged)");
  add_io(cast, a->cast.src, a->cast.out, a->no_progress);

  auto* experts = cmd->add_subcommand("experts", "Re-encode FP4 routed experts losslessly to FP8 e4m3 128x128");
  experts->add_option("--to", a->to, "target encoding")->required()->check(CLI::IsMember({"fp8"}));
  add_io(experts, a->experts.src, a->experts.out, a->no_progress);

  auto* shard = cmd->add_subcommand("shard", "Split into model{rank}-mp{N}.safetensors for N-way tensor parallelism");
  shard->add_option("--tp", a->shard.tp, "number of ranks")->required()->check(at_least(1));
  add_io(shard, a->shard.src, a->shard.out, a->no_progress);

  return [a, cast, experts]() {
    if (cast->parsed()) {
      a->cast.out.progress = !a->no_progress;
      return finish(convert::convert_cast(a->cast));
    }
    if (experts->parsed()) {
      a->experts.out.progress = !a->no_progress;
      return finish(convert::convert_experts_fp8(a->experts));
    }
    a->shard.out.progress = !a->no_progress;
    return finish(convert::convert_shard(a->shard));
  };
}

}  // namespace plumb::cli
