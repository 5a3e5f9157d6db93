// ScopedEnv: the tests' environment switch sets or unsets a variable and puts back what was there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "scoped_env.h"

namespace plumb::test {
namespace {

constexpr const char* kName = "PLUMB_SCOPED_ENV_TEST";

TEST(ScopedEnv, SetsOrUnsetsAndRestores) {
  ::unsetenv(kName);
  {
    const ScopedEnv set(kName, "a");
    ASSERT_NE(std::getenv(kName), nullptr);
    EXPECT_EQ(std::string(std::getenv(kName)), "a");
    {
      const ScopedEnv unset(kName, nullptr);
      EXPECT_EQ(std::getenv(kName), nullptr);
    }
    ASSERT_NE(std::getenv(kName), nullptr);  // the outer value is back
    EXPECT_EQ(std::string(std::getenv(kName)), "a");
  }
  EXPECT_EQ(std::getenv(kName), nullptr);  // absent before: absent after
}

}  // namespace
}  // namespace plumb::test
