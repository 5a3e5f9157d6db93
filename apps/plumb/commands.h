#pragma once
// Each subcommand lives in its own cmd_*.cpp: it declares its flags on the CLI11 app and calls
// into src/plumb. main.cpp only wires them together and maps errors to exit codes.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace plumb::cli {

// A registered subcommand: run() is called after parsing if the subcommand was selected.
using Runner = std::function<int()>;

// Accepted --backend values: "cpu", and the GPU names ("cuda", "hip", "gpu"); a GPU name this
// build or machine cannot serve is refused by backend::make_backend with the reason.
inline std::vector<std::string> backend_names() { return {"cpu", "cuda", "hip", "gpu"}; }

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
Runner register_verify(CLI::App& app);
Runner register_batch(CLI::App& app);
Runner register_serve(CLI::App& app);
Runner register_bench(CLI::App& app);  // plumb bench serve
Runner register_doctor(CLI::App& app);  // exits 1 on warnings

}  // namespace plumb::cli
