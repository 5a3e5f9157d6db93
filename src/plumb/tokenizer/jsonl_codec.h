#pragma once
// Line-by-line conversion behind `plumb tokenize` and `plumb detokenize`: JSON strings in, JSON
// arrays of ids out, and back. Errors name the input and the 1-based line number.
#include <cstddef>
#include <istream>
#include <ostream>
#include <string>

#include "plumb/tokenizer/tokenizer.h"

namespace plumb {

// Each input line is a JSON string; writes the JSON array of its ids. Returns the line count.
std::size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                           const std::string& input_name, bool add_bos);

// Each input line is a JSON array of ids; writes the decoded text as a JSON string.
std::size_t detokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                             const std::string& input_name, bool skip_special);

// The same on files; "-" means stdin / stdout. Throws plumb::Error naming a file that cannot be
// opened.
std::size_t tokenize_file(const Tokenizer& tokenizer, const std::string& input_path, const std::string& output_path,
                          bool add_bos);
std::size_t detokenize_file(const Tokenizer& tokenizer, const std::string& input_path, const std::string& output_path,
                            bool skip_special);

}  // namespace plumb
