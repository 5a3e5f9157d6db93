// /metrics' memory gauges: one plumb_memory_bytes sample per known kind with the engine's numbers,
// nothing for a kind the backend does not know.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "plumb/server/metrics.h"

namespace plumb::server {
namespace {

// kind -> value of every plumb_memory_bytes{kind="..."} sample; counts the HELP and TYPE lines.
struct MemorySamples {
  std::map<std::string, std::string> values;
  int help = 0, type = 0;
};

MemorySamples memory_samples(const std::string& text) {
  MemorySamples s;
  std::istringstream lines(text);
  const std::string prefix = "plumb_memory_bytes{kind=\"";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP plumb_memory_bytes ", 0) == 0) ++s.help;
    if (line == "# TYPE plumb_memory_bytes gauge") ++s.type;
    if (line.rfind(prefix, 0) != 0) continue;
    const std::size_t end = line.find("\"} ", prefix.size());
    EXPECT_NE(end, std::string::npos) << line;
    EXPECT_TRUE(s.values.emplace(line.substr(prefix.size(), end - prefix.size()), line.substr(end + 3)).second) << line;
  }
  return s;
}

TEST(MetricsMemory, EveryKnownKindWithItsBytes) {
  runtime::EngineStats stats;
  stats.memory = {"cuda:0 NVIDIA H200", 7'412'334'592, 4'294'967'296, 123'456'789, 987'654'321,
                  150'000'000'000, 141'000'000'000, 3'221'225'472};
  const MemorySamples s = memory_samples(render_metrics(stats, ServerMetrics{}));
  EXPECT_EQ(s.help, 1);
  EXPECT_EQ(s.type, 1);
  const std::map<std::string, std::string> want = {
      {"weights", "7412334592"},         {"kv_pool", "4294967296"},        {"sequence_state", "123456789"},
      {"workspace", "987654321"},        {"device_total", "150000000000"}, {"device_free", "141000000000"},
      {"host_rss", "3221225472"}};
  EXPECT_EQ(s.values, want);
}

TEST(MetricsMemory, UnknownKindsAreLeftOut) {
  runtime::EngineStats stats;  // every kind -1
  stats.memory.kv_pool = 65536;
  stats.memory.host_rss = 0;  // known, and zero
  const MemorySamples s = memory_samples(render_metrics(stats, ServerMetrics{}));
  EXPECT_EQ(s.values, (std::map<std::string, std::string>{{"kv_pool", "65536"}, {"host_rss", "0"}}));
  EXPECT_EQ(s.type, 1);
}

}  // namespace
}  // namespace plumb::server
