// plumb tokenize --tokenizer PATH --input IN.jsonl --output OUT.jsonl [--add-bos]: each input line
// is a JSON string, each output line the JSON array of its token ids.
#include <memory>
#include <string>

#include "commands.h"
#include "plumb/tokenizer/jsonl_codec.h"

namespace plumb::cli {

Runner register_tokenize(CLI::App& app) {
  struct Options {
    std::string tokenizer, input = "-", output = "-";
    bool add_bos = false;
  };
  auto* cmd = app.add_subcommand("tokenize", "Encode JSON-string lines to JSON arrays of token ids");
  auto o = std::make_shared<Options>();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json or a model directory holding one")->required();
  cmd->add_option("--input", o->input, "input .jsonl, one JSON string per line (- for stdin)")->capture_default_str();
  cmd->add_option("--output", o->output, "output .jsonl, one JSON array per line (- for stdout)")->capture_default_str();
  cmd->add_flag("--add-bos", o->add_bos, "prepend the BOS token (from tokenizer_config.json)");
  return [o]() {
    Tokenizer tokenizer = Tokenizer::load(o->tokenizer);
    tokenize_file(tokenizer, o->input, o->output, o->add_bos);
    return 0;
  };
}

}  // namespace plumb::cli
