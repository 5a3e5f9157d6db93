#include "plumb/util/progress.h"

#include <gtest/gtest.h>

TEST(FormatBytes, UsesDecimalUnits) {
  EXPECT_EQ(plumb::format_bytes(0), "0 B");
  EXPECT_EQ(plumb::format_bytes(999), "999 B");
  EXPECT_EQ(plumb::format_bytes(1500), "1.50 KB");
  EXPECT_EQ(plumb::format_bytes(159609485896.0), "159.61 GB");
}
