#pragma once
// Pinned host memory for small host-to-device uploads (pointer tables, per-call sequence tables)
// that must not wait for the device: the bytes are copied into one of a ring of pinned slots, the
// copy is enqueued on the stream, and an event marks when the stream has passed it. A slot is
// reused only after its event completed, which with 256 slots is long before it comes round
// again, so uploads neither synchronize nor depend on the caller's buffer outliving the call.
#include <cstddef>
#include <vector>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu {

class StagingRing {
 public:
  static constexpr std::size_t kSlotBytes = 16 * 1024;
  static constexpr int kSlots = 256;

  StagingRing() = default;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  ~StagingRing();

  // Enqueues dst <- data (bytes <= kSlotBytes) on stream s; returns false (nothing enqueued)
  // where pinned memory could not be had, and the caller then copies synchronously.
  bool upload(void* dst, const void* data, std::size_t bytes, gpuStream_t s);

 private:
  bool ready();  // allocates on first use
  unsigned char* host_ = nullptr;
  std::vector<gpuEvent_t> events_;
  std::vector<bool> recorded_;
  int next_ = 0;
  bool failed_ = false;
};

}  // namespace plumb::gpu
