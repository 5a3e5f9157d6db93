#pragma once
// Each subcommand lives in its own cmd_*.cpp: it declares its flags on the CLI11 app and calls
// into src/plumb. main.cpp only wires them together and maps errors to exit codes.
#include <CLI/CLI.hpp>

#include <functional>

namespace plumb::cli {

// A registered subcommand: run() is called after parsing if the subcommand was selected.
using Runner = std::function<int()>;

Runner register_inspect(CLI::App& app);
Runner register_synth(CLI::App& app);
Runner register_convert(CLI::App& app);
Runner register_logits(CLI::App& app);
Runner register_generate(CLI::App& app);
Runner register_tokenize(CLI::App& app);
Runner register_detokenize(CLI::App& app);
Runner register_run(CLI::App& app);
Runner register_chat(CLI::App& app);
Runner register_perplexity(CLI::App& app);

}  // namespace plumb::cli
