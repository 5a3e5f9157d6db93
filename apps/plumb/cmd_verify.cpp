// plumb verify --model DIR --backend cuda [--against cpu | --against-dumps DIR] --ids IDS --report OUT:
// per-tap, logits and greedy-token comparison of a backend against a reference, with an audit
// trail (verify.json / verify.md / verify.html).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>

#include "commands.h"
#include "generation_flags.h"
#include "plumb/format/npy.h"
#include "plumb/util/error.h"
#include "plumb/verify/run.h"

namespace plumb::cli {

namespace {

struct VerifyArgs {
  verify::VerifyOptions opt;
  std::string ids, report, gpu_order;
};

// A .npy of int32/int64 ids (what `plumb logits --ids` takes), or for quick runs an inline
// comma-separated list such as "0,17,42".
std::vector<TokenId> parse_ids(const std::string& s) {
  if (s.find_first_not_of("0123456789, ") == std::string::npos && s.find_first_of("0123456789") != std::string::npos) {
    std::vector<TokenId> ids;
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t j = s.find(',', i);
      const std::string tok = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
      const auto b = tok.find_first_not_of(' '), e = tok.find_last_not_of(' ');
      if (b == std::string::npos) fail("--ids {}: empty entry in the id list", s);
      const std::string digits = tok.substr(b, e - b + 1);
      if (digits.find(' ') != std::string::npos || digits.size() > 10 || std::stoll(digits) > INT32_MAX)
        fail("--ids {}: '{}' is not a token id", s, digits);
      ids.push_back(static_cast<TokenId>(std::stoll(digits)));
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return ids;
  }
  return read_token_ids(s);
}

// The exact argv (Linux /proc), for the audit trail; elsewhere the options as parsed.
std::string command_line(const VerifyArgs& a) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), line;
  for (char& c : all) c = c == '\0' ? ' ' : c;
  while (!all.empty() && all.back() == ' ') all.pop_back();
  if (!all.empty()) return all;
  const verify::VerifyOptions& o = a.opt;
  return fmt::format(
      "plumb verify --model {} --backend {} {} --numerics {} --ids {} --report {} --steps {} --threshold {}{}{}",
      o.model, o.backend, o.against_dumps.empty() ? "--against " + o.against : "--against-dumps " + o.against_dumps,
      o.numerics, a.ids, a.report, o.steps, o.threshold, o.isolate_layers ? " --isolate-layers" : "",
      a.gpu_order.empty() ? "" : " --gpu-order " + a.gpu_order);
}

}  // namespace

Runner register_verify(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("verify",
                         "Compare a backend against a reference tap by tap, on the logits and on greedy tokens.\n"
                         "Exit status: 0 every tap passes (cosine >= --threshold) and greedy tokens agree;\n"
                         "3 the comparison failed (the report names the first failing tap); 2 bad input.");
  auto a = std::make_shared<VerifyArgs>();
  cmd->add_option("--model", a->opt.model, "checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--backend", a->opt.backend, "backend under test")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  auto* against = cmd->add_option("--against", a->opt.against, "reference backend")
                      ->check(CLI::IsMember(backend_names()))
                      ->capture_default_str();
  cmd->add_option("--against-dumps", a->opt.against_dumps,
                  "reference taps: DIR/<tap>.npy written by `plumb logits --dump-taps DIR` (same prompt)")
      ->excludes(against);
  cmd->add_option("--numerics", a->opt.numerics, "reference or faithful (both sides of a live comparison)")
      ->check(CLI::IsMember({"reference", "faithful"}))
      ->capture_default_str();
  cmd->add_option("--ids", a->ids, "prompt token ids: int32/int64 .npy of shape [T] (as plumb logits), or \"1,2,3\"")
      ->required();
  cmd->add_option("--report", a->report, "output directory for verify.json, verify.md, verify.html")->required();
  cmd->add_option("--steps", a->opt.steps, "greedy tokens to generate and compare (0: none)")->capture_default_str();
  cmd->add_option("--threshold", a->opt.threshold, "a tap passes at cosine similarity >= this")->capture_default_str();
  cmd->add_option("--threads", a->opt.threads, "CPU threads (0: all)")->check(thread_count())->capture_default_str();
  cmd->add_flag("--isolate-layers", a->opt.isolate_layers,
                "start every layer of the tested backend from the reference's residual stream (its layer.L.hc taps "
                "on deepseek_v4, layer.L.residual on deepseek_v3), so each layer is judged on equal inputs");
  cmd->add_option("--gpu-order", a->gpu_order,
                  "GPU reduction order: cpu (sum in the CPU backend's order: bitwise the CPU's results, slower) or "
                  "fast (each kernel's own order); default: $PLUMB_GPU_ORDER, else fast")
      ->check(CLI::IsMember({"cpu", "fast"}));
  return [a]() {
    // The GPU backend reads its reduction order from the environment when it starts.
    if (!a->gpu_order.empty()) ::setenv("PLUMB_GPU_ORDER", a->gpu_order.c_str(), 1);
    a->opt.ids = parse_ids(a->ids);
    a->opt.command_line = command_line(*a);
    const verify::VerifyReport r = verify::run_verify(a->opt);
    verify::write_reports(r, a->report);
    if (r.passed()) {
      std::fprintf(stderr, "verify: PASS (%zu taps) -> %s\n", r.taps.size(), a->report.c_str());
      return 0;
    }
    const std::string tap = r.first_failing_tap();
    std::fprintf(stderr, "verify: FAIL: %s%s -> %s\n", tap.empty() ? "" : ("first failing tap " + tap).c_str(),
                 r.greedy_agree() ? "" : (tap.empty() ? "greedy tokens diverge" : "; greedy tokens diverge"),
                 a->report.c_str());
    return 3;
  };
}

}  // namespace plumb::cli
