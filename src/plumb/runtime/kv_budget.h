#pragma once
// How many MiB the KV pool and the per-sequence state get when --kv-cache-mb is not given: a
// fraction of the device memory free at start (--gpu-memory-fraction, as vLLM's
// gpu_memory_utilization but of free memory, so other processes' use is left alone), minus the
// weights still to be uploaded (the GPU backend uploads each weight on its first use) and a
// reserve for activations and scratch. On the CPU backend the pool is host memory and the old
// fixed default stands.
#include <cstdint>
#include <string>

#include "plumb/backend/device_facts.h"

namespace plumb::runtime {

inline constexpr std::int64_t kHostCacheMib = 4096;
inline constexpr double kDefaultGpuMemoryFraction = 0.9;

// Activations and scratch of one engine step, estimated: a fixed part (the sparse attention's
// score scratch is bounded by 1 GiB, plus the allocator's slack) and about 1 MiB per batch token
// (a V4-Flash token's live activations in one layer: residual streams, q, attention output,
// the routed experts' gathered rows; ~0.6-0.9 MiB counted, rounded up).
std::int64_t workspace_reserve_bytes(std::int64_t max_batch_tokens);

struct KvBudget {
  std::int64_t cache_mib = 0;
  std::string how;  // one line for the memory table: where the number came from
};

// d: the device's memory at start (backend::device_memory); weight_bytes: the checkpoint's
// weights (all of them go to the device). Throws plumb::Error naming the numbers when the
// budget leaves no room, or when fraction is outside (0, 1].
KvBudget kv_budget(const backend::DeviceMemory& d, std::int64_t weight_bytes, double fraction,
                   std::int64_t max_batch_tokens);

}  // namespace plumb::runtime
