#include "plumb/backend/gpu/gpu_staging.h"

#include <cstring>

namespace plumb::gpu {

StagingRing::~StagingRing() {
  for (std::size_t i = 0; i < events_.size(); ++i) {
    if (recorded_[i]) (void)gpuEventSynchronize(events_[i]);
    (void)gpuEventDestroy(events_[i]);
  }
  if (host_) (void)gpuHostFree(host_);
}

bool StagingRing::ready() {
  if (host_ || failed_) return host_ != nullptr;
  void* p = nullptr;
  if (gpuHostMalloc(&p, kSlotBytes * kSlots) != gpuSuccess) {
    (void)gpuGetLastError();  // clear it: the synchronous fallback still works
    failed_ = true;
    return false;
  }
  events_.resize(kSlots);
  recorded_.assign(kSlots, false);
  for (auto& e : events_)
    if (gpuEventCreate(&e) != gpuSuccess) {
      (void)gpuGetLastError();
      failed_ = true;
      (void)gpuHostFree(p);
      return false;
    }
  host_ = static_cast<unsigned char*>(p);
  return true;
}

bool StagingRing::upload(void* dst, const void* data, std::size_t bytes, gpuStream_t s) {
  if (bytes > kSlotBytes || !ready()) return false;
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  if (recorded_[slot] && gpuEventSynchronize(events_[slot]) != gpuSuccess) return false;
  unsigned char* h = host_ + static_cast<std::size_t>(slot) * kSlotBytes;
  std::memcpy(h, data, bytes);
  if (gpuMemcpyAsync(dst, h, bytes, gpuMemcpyHostToDevice, s) != gpuSuccess) return false;
  recorded_[slot] = gpuEventRecord(events_[slot], s) == gpuSuccess;
  if (!recorded_[slot]) (void)gpuStreamSynchronize(s);  // without the event, the slot must be free now
  return true;
}

}  // namespace plumb::gpu
