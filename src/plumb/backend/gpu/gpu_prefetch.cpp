// GpuBackend::prefetch (backend.h, "hints"): the weights' device bytes into L2 from a second
// stream, ahead of the linears that read them (kernels/prefetch.cu says why). The warmer starts
// when the work enqueued before the hint has finished (an event), so it runs beside the kernels
// enqueued after it (the step's norms and attention) and never ahead of the weights' previous
// readers; nothing waits for it, so a warmer that is late only costs bandwidth.
#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/prefetch.h"

namespace plumb::gpu {

void GpuBackend::prefetch(std::span<const WeightView* const> weights, int64_t rows) {
  if (prefetch_blocks_ <= 0 || !prefetch_available_ || rows > kPrefetchRows) return;
  k::PrefetchRanges r;
  auto flush = [&] {  // a warmer for the ranges so far, once the work enqueued before the hint is done
    if (r.n == 0) return;
    if (!prefetch_stream_) {
      check(gpuStreamCreateWithFlags(&prefetch_stream_, gpuStreamNonBlocking), "creating the prefetch stream");
      check(gpuEventCreateWithFlags(&prefetch_event_, gpuEventDisableTiming), "creating the prefetch event");
    }
    check(gpuEventRecord(prefetch_event_, stream_), "prefetch: recording the step's point");
    check(gpuStreamWaitEvent(prefetch_stream_, prefetch_event_, 0), "prefetch: waiting for the step's point");
    if (!prefetch_events_only_) {
      check_launch(k::prefetch_l2_ranges(r, prefetch_blocks_, prefetch_stream_), "prefetch (L2 warmer)");
      ++prefetch_launches_;
    }
    r.n = 0;
  };
  auto add = [&](const uint8_t* p, std::size_t bytes) {
    if (!p || bytes == 0) return;
    if (r.n == k::kPrefetchMaxRanges) flush();
    r.r[r.n++] = {p, static_cast<int64_t>(bytes)};
  };
  for (const WeightView* w : weights) {
    if (!w || !w->present()) continue;
    const WeightRef& ref = weight(*w);
    const auto [data, scale] = stored_bytes(ref);
    add(ref.data, data);
    add(ref.scale, scale);
  }
  flush();
}

}  // namespace plumb::gpu
