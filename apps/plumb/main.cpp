// plumb: one binary, many subcommands. Exit codes: 0 ok, 2 bad input or usage, 1 internal error.
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "commands.h"
#include "plumb/dist/world.h"
#include "plumb/util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"plumb: a correctness-first inference engine for DeepSeek-V4-Flash and V3"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "plumb 0.1.0");

  std::vector<std::pair<CLI::App*, plumb::cli::Runner>> commands;
  // Each register_* adds exactly one subcommand: pair it with its runner.
  auto add = [&](plumb::cli::Runner r) {
    auto all = app.get_subcommands([](CLI::App*) { return true; });
    commands.emplace_back(all.back(), std::move(r));
  };
  add(plumb::cli::register_inspect(app));
  add(plumb::cli::register_synth(app));
  add(plumb::cli::register_convert(app));
  add(plumb::cli::register_logits(app));
  add(plumb::cli::register_generate(app));
  add(plumb::cli::register_tokenize(app));
  add(plumb::cli::register_detokenize(app));
  add(plumb::cli::register_run(app));
  add(plumb::cli::register_chat(app));
  add(plumb::cli::register_perplexity(app));
  add(plumb::cli::register_verify(app));  // exits 3 when the comparison fails
  add(plumb::cli::register_batch(app));
  add(plumb::cli::register_serve(app));
  add(plumb::cli::register_bench(app));  // bench serve
  add(plumb::cli::register_doctor(app));  // exits 1 on warnings, 2 on errors

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
    return 2;
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb: error: %s\n", e.what());
    plumb::dist::abort_if_parallel(2);  // the other ranks may be waiting in a collective
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb: internal error: %s\n", e.what());
    plumb::dist::abort_if_parallel(1);
    return 1;
  }
}
