#include "plumb/tokenizer/jsonl_codec.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <vector>

#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb {
namespace {

using nlohmann::json;

// Calls convert(parsed line) for every line of `in`, prefixing errors with "input:line: ".
std::size_t for_each_json_line(std::istream& in, const std::string& input_name,
                               const std::function<void(const json&)>& convert) {
  std::size_t line_number = 0;
  for (std::string line; read_line(in, line, fmt::format("{}:{}", input_name, line_number + 1));) {
    ++line_number;
    try {
      json value;
      try {
        value = json::parse(line);
      } catch (const json::exception&) {
        fail("not valid JSON: {}", line.size() > 80 ? line.substr(0, 80) + "..." : line);
      }
      convert(value);
    } catch (const Error& e) {
      rethrow_with_context(fmt::format("{}:{}", input_name, line_number), e);
    }
  }
  return line_number;
}

std::vector<std::uint32_t> ids_of(const json& value) {
  if (!value.is_array()) fail("expected a JSON array of token ids, got {}", value.type_name());
  std::vector<std::uint32_t> ids;
  ids.reserve(value.size());
  for (const json& id : value) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > UINT32_MAX)
      fail("token ids must be non-negative integers, got {}", id.dump());
    ids.push_back(id.get<std::uint32_t>());
  }
  return ids;
}

using LineConverter = std::size_t (*)(const Tokenizer&, std::istream&, std::ostream&, const std::string&, bool);

std::size_t convert_file(LineConverter convert, const Tokenizer& tokenizer, const std::string& input_path,
                         const std::string& output_path, bool flag) {
  // A named input must be a regular file (a FIFO would block, /dev/zero never ends); "-" streams.
  std::ifstream in_file;
  if (input_path != "-") in_file = open_regular_stream(input_path, "input file");
  std::ofstream out_file;
  if (output_path != "-") {
    out_file.open(output_path, std::ios::binary | std::ios::trunc);
    if (!out_file) fail("cannot write output {}", output_path);
  }
  std::istream& in = input_path == "-" ? std::cin : in_file;
  std::ostream& out = output_path == "-" ? std::cout : out_file;
  std::size_t lines = convert(tokenizer, in, out, input_path == "-" ? "<stdin>" : input_path, flag);
  // A read error (stdin a directory, an I/O error) ends the lines like the end of the input does.
  if (in.bad() || (input_path == "-" && std::ferror(stdin)))
    fail("{}: read error after {} lines", input_path == "-" ? "<stdin>" : input_path, lines);
  out.flush();
  if (!out) fail("error writing {}", output_path == "-" ? "<stdout>" : output_path);
  return lines;
}

}  // namespace

std::size_t tokenize_file(const Tokenizer& tokenizer, const std::string& input_path, const std::string& output_path,
                          bool add_bos) {
  return convert_file(tokenize_lines, tokenizer, input_path, output_path, add_bos);
}

std::size_t detokenize_file(const Tokenizer& tokenizer, const std::string& input_path, const std::string& output_path,
                            bool skip_special) {
  return convert_file(detokenize_lines, tokenizer, input_path, output_path, skip_special);
}

std::size_t tokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                           const std::string& input_name, bool add_bos) {
  return for_each_json_line(in, input_name, [&](const json& value) {
    if (!value.is_string()) fail("expected a JSON string, got {}", value.type_name());
    out << json(tokenizer.encode(value.get_ref<const std::string&>(), add_bos)).dump() << '\n';
  });
}

std::size_t detokenize_lines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                             const std::string& input_name, bool skip_special) {
  return for_each_json_line(in, input_name, [&](const json& value) {
    out << json(tokenizer.decode(ids_of(value), skip_special)).dump() << '\n';
  });
}

}  // namespace plumb
