#include "plumb/runtime/stop_strings.h"

#include <gtest/gtest.h>

namespace plumb {
namespace {

TEST(StopStrings, StopsBeforeTheStopStringEvenWhenSplit) {
  StopStrings stops({"\nUser:", "###"});
  auto a = stops.push("Hello");
  EXPECT_EQ(a.text, "Hello");
  EXPECT_FALSE(a.stopped);
  auto b = stops.push(" there\nUs");  // "\nUs" could become "\nUser:": held back
  EXPECT_EQ(b.text, " there");
  auto c = stops.push("er: next");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.text, "");
  EXPECT_EQ(stops.push("more").text, "");  // nothing after a stop
  EXPECT_EQ(stops.finish(), "");
}

TEST(StopStrings, ReleasesHeldTextThatDidNotBecomeAStop) {
  StopStrings stops({"###"});
  EXPECT_EQ(stops.push("a#").text, "a");
  EXPECT_EQ(stops.push("#b").text, "##b");
  EXPECT_EQ(stops.push("c##").text, "c");
  EXPECT_EQ(stops.finish(), "##");
}

TEST(StopStrings, EarliestStopWinsAndTextBeforeItIsKept) {
  StopStrings stops({"world", "lo w"});
  auto out = stops.push("hello world");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "hel");
}

TEST(StopStrings, NoStopsPassEverythingThrough) {
  StopStrings stops({});
  EXPECT_EQ(stops.push("anything").text, "anything");
  EXPECT_EQ(stops.finish(), "");
}

}  // namespace
}  // namespace plumb
