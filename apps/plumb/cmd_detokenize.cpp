// plumb detokenize --tokenizer PATH --input IN.jsonl --output OUT.jsonl [--skip-special]: each
// input line is a JSON array of token ids, each output line the decoded text as a JSON string.
#include <memory>
#include <string>

#include "commands.h"
#include "plumb/tokenizer/jsonl_codec.h"

namespace plumb::cli {

Runner register_detokenize(CLI::App& app) {
  struct Options {
    std::string tokenizer, input = "-", output = "-";
    bool skip_special = false;
  };
  auto* cmd = app.add_subcommand("detokenize", "Decode JSON arrays of token ids to JSON-string lines");
  auto o = std::make_shared<Options>();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json or a model directory holding one")->required();
  cmd->add_option("--input", o->input, "input .jsonl, one JSON array of ids per line (- for stdin)")->capture_default_str();
  cmd->add_option("--output", o->output, "output .jsonl, one JSON string per line (- for stdout)")->capture_default_str();
  cmd->add_flag("--skip-special", o->skip_special, "leave out tokens marked special");
  return [o]() {
    Tokenizer tokenizer = Tokenizer::load(o->tokenizer);
    detokenize_file(tokenizer, o->input, o->output, o->skip_special);
    return 0;
  };
}

}  // namespace plumb::cli
