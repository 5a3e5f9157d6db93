// The KV pool's size without --kv-cache-mb (issue 15 item 1): a share of the device's free memory
// less the weights still to upload and a workspace reserve; the host keeps its fixed default.
#include <gtest/gtest.h>

#include "plumb/runtime/kv_budget.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30, kMiB = std::int64_t{1} << 20;

backend::DeviceMemory gpu(std::int64_t free, std::int64_t uploaded) {
  backend::DeviceMemory d;
  d.device = "cuda:0 NVIDIA H200";
  d.total = 140 * kGiB;
  d.free = free;
  d.weights = uploaded;
  return d;
}

TEST(KvBudget, FractionOfFreeLessPendingWeightsAndReserve) {
  // 100 GiB free, 0.9 of it; 10 GiB of weights of which none is on the device yet; 2048 tokens a
  // step reserve 2 GiB + 2048 MiB.
  const KvBudget b = kv_budget(gpu(100 * kGiB, 0), 10 * kGiB, 0.9, 2048);
  EXPECT_EQ(b.cache_mib, (90 * kGiB - 10 * kGiB - 4 * kGiB) / kMiB);
  EXPECT_NE(b.how.find("0.9"), std::string::npos) << b.how;
  // Weights already uploaded are in use, not free: only the rest is taken off.
  EXPECT_EQ(kv_budget(gpu(100 * kGiB, 6 * kGiB), 10 * kGiB, 0.9, 2048).cache_mib, (90 * kGiB - 4 * kGiB - 4 * kGiB) / kMiB);
  // A larger step budget reserves more.
  EXPECT_EQ(kv_budget(gpu(100 * kGiB, 0), 10 * kGiB, 1.0, 8192).cache_mib, (100 * kGiB - 10 * kGiB - 10 * kGiB) / kMiB);
}

TEST(KvBudget, TheHostKeepsItsDefault) {
  backend::DeviceMemory host;
  host.device = "host";
  host.free = 3 * kGiB;
  EXPECT_EQ(kv_budget(host, 50 * kGiB, 0.9, 2048).cache_mib, kHostCacheMib);
  EXPECT_EQ(kv_budget(backend::DeviceMemory{}, 50 * kGiB, 0.9, 2048).cache_mib, kHostCacheMib);  // nothing reported
}

TEST(KvBudget, NoRoomIsAnErrorNamingTheNumbers) {
  try {
    kv_budget(gpu(20 * kGiB, 0), 16 * kGiB, 0.9, 2048);
    FAIL() << "a budget below zero was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* s : {"--gpu-memory-fraction", "--kv-cache-mb", "cuda:0", "weights", "reserve"})
      EXPECT_NE(m.find(s), std::string::npos) << s << " missing from: " << m;
  }
  for (const double f : {0.0, -0.5, 1.5}) EXPECT_THROW(kv_budget(gpu(100 * kGiB, 0), kGiB, f, 1), Error) << f;
}

}  // namespace
}  // namespace plumb::runtime
