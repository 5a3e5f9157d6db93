#pragma once
// Errors are values with context: every failure names the file/tensor/field and what was
// expected. plumb::Error is for bad input (exit code 2 at the CLI); anything else escaping to
// main is an internal bug (exit code 1).
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace plumb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Rethrows `e` with a prefix naming where it happened ("file.safetensors: ...").
[[noreturn]] inline void rethrow_with_context(const std::string& context, const std::exception& e) {
  throw Error(context + ": " + e.what());
}

}  // namespace plumb
