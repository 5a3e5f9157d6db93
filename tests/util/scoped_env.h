#pragma once
// An environment variable set (or, with a null value, unset) for a scope and restored after: the
// tests' switch for what plumb reads from the environment (PLUMB_GPU_* A/B switches, doctor's
// pitfalls, host facts).
#include <cstdlib>
#include <string>

namespace plumb::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    value ? (void)::setenv(name, value, 1) : (void)::unsetenv(name);
  }
  ~ScopedEnv() { had_ ? (void)::setenv(name_.c_str(), old_.c_str(), 1) : (void)::unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace plumb::test
