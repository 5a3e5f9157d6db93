#pragma once
// Running the plumb binary from a test: exit status, stdout and stderr (kept apart), stdin given.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../format/safetensors_corpus.h"

namespace plumb::test {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CliResult {
  int status;  // the exit status, -1 when plumb did not exit normally
  std::string out, err;
};

// Runs `plumb ARGS` (shell words) with `input` on stdin; the streams pass through files in `scratch`.
inline CliResult plumb(const std::string& args, const std::filesystem::path& scratch, const std::string& input = "") {
  const auto in = scratch / "stdin.txt", out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  write_file(in, input);
  const std::string cmd =
      std::string(PLUMB_BINARY) + " " + args + " < " + in.string() + " > " + out.string() + " 2> " + err.string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(out), read_file(err)};
}

}  // namespace plumb::test
