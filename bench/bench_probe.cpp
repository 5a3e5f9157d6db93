#include "bench_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "plumb/util/error.h"
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
#include "plumb/backend/gpu/gpu_compat.h"
#endif

namespace plumb::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

namespace {
constexpr std::size_t kBytes = std::size_t{1} << 30;
constexpr int kReps = 20;

double host_copy_gbs() {
  std::vector<char> a(kBytes / 4, 1), b(kBytes / 4);
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(a.size()) / median(t) / 1e9;
}

#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
void ok(gpuError_t e, const char* what) {
  if (e != gpuSuccess) fail("copy bandwidth probe: {} failed: {}", what, gpuGetErrorString(e));
}

double device_copy_gbs() {
  void *a = nullptr, *b = nullptr;
  ok(gpuMalloc(&a, kBytes), "allocation");
  ok(gpuMalloc(&b, kBytes), "allocation");
  gpuEvent_t e0, e1;
  ok(gpuEventCreate(&e0), "event");
  ok(gpuEventCreate(&e1), "event");
  // Random-ish bytes, not zeros (METHOD: zeros can run faster than real data).
  std::vector<unsigned char> host(1 << 20);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 2654435761u >> 24);
  for (std::size_t off = 0; off < kBytes; off += host.size())
    ok(gpuMemcpy(static_cast<char*>(a) + off, host.data(), host.size(), gpuMemcpyHostToDevice), "fill");
  std::vector<double> ms;
  for (int r = 0; r < kReps + 3; ++r) {
    ok(gpuEventRecord(e0, nullptr), "record");
    ok(gpuMemcpyAsync(b, a, kBytes, gpuMemcpyDeviceToDevice, nullptr), "copy");
    ok(gpuEventRecord(e1, nullptr), "record");
    ok(gpuEventSynchronize(e1), "sync");
    float t = 0;
    ok(gpuEventElapsedTime(&t, e0, e1), "elapsed");
    if (r >= 3) ms.push_back(t);
  }
  (void)gpuEventDestroy(e0);
  (void)gpuEventDestroy(e1);
  (void)gpuFree(a);
  (void)gpuFree(b);
  return 2.0 * static_cast<double>(kBytes) / (median(ms) * 1e-3) / 1e9;
}
#endif
}  // namespace

double copy_bandwidth_gbs(backend::Backend& be) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (be.name() != "cpu") return device_copy_gbs();
#endif
  return host_copy_gbs();
}

}  // namespace plumb::bench
