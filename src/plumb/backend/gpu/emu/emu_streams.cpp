// The emulator's streams and events (emu_cuda.h, "Streams"): work runs at once, except on a held
// stream, whose work queues until something waits for it. Why: the emulator runs every launch
// when it is issued, so two streams could never overlap there and a missing wait between them
// went unseen; a held stream runs its work as late as a device may, and a reader that skipped
// the wait reads the values from before (GpuBackend's side chains, PLUMB_GPU_LANES=delayed).
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "plumb/backend/gpu/emu/emu_cuda.h"

struct CUstream_st {
  bool held = false;
  std::deque<std::function<void()>> queue;  // a held stream's work not yet run
  uint64_t issued = 0, run = 0;             // queued so far, run so far
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  cudaStream_t stream = nullptr;
  uint64_t mark = 0;  // the stream's queued work issued before the record
};

namespace plumb::gpu::emu {
namespace {

std::mutex g_streams_mutex;
std::vector<cudaStream_t> g_held;

// Runs s's queued work up to its `mark`th item, in order (outside the lock: the work launches).
void run_until(cudaStream_t s, uint64_t mark) {
  for (;;) {
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(g_streams_mutex);
      if (!s || s->run >= mark || s->queue.empty()) return;
      work = std::move(s->queue.front());
      s->queue.pop_front();
      ++s->run;
    }
    work();
  }
}
void run_all(cudaStream_t s) {
  if (s) run_until(s, s->issued);
}

// Queues work on s when s is held (true), else leaves it to the caller to run at once (false).
bool queued(cudaStream_t s, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  if (!s || !s->held) return false;
  s->queue.push_back(std::move(work));
  ++s->issued;
  return true;
}

}  // namespace

void hold_stream(cudaStream_t s, bool on) {
  if (!s) return;
  if (!on) run_all(s);
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  if (s->held == on) return;
  s->held = on;
  if (on)
    g_held.push_back(s);
  else
    std::erase(g_held, s);
}

void run_held_streams() {
  std::vector<cudaStream_t> held;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    held = g_held;
  }
  for (cudaStream_t s : held) run_all(s);
}

int launch_on(cudaStream_t s, dim3 grid, dim3 block, std::size_t smem, std::function<void()> body) {
  // (a configuration launch() refuses is refused at once, as unheld)
  if (!config_error(grid, block, smem) && queued(s, [grid, block, smem, body] { (void)launch(grid, block, smem, body); }))
    return 0;
  return launch(grid, block, smem, body);
}

}  // namespace plumb::gpu::emu

using plumb::gpu::emu::queued;
using plumb::gpu::emu::run_all;
using plumb::gpu::emu::run_until;

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k, cudaStream_t s) {
  const bool held = s && s->held;
  if (held && (k == cudaMemcpyHostToDevice || k == cudaMemcpyHostToHost)) {  // the host's bytes as they are now
    std::vector<unsigned char> copy(static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    if (queued(s, [dst, copy = std::move(copy)] {
          if (!copy.empty()) std::memmove(dst, copy.data(), copy.size());
        }))
      return cudaSuccess;
  } else if (held && k == cudaMemcpyDeviceToDevice) {
    if (queued(s, [dst, src, bytes] { (void)cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice); })) return cudaSuccess;
  } else if (held) {
    run_all(s);  // the host reads the result
  }
  return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s) {
  if (queued(s, [p, value, bytes] {
        if (bytes) std::memset(p, value, bytes);
      }))
    return cudaSuccess;
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  run_all(s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  plumb::gpu::emu::hold_stream(s, false);  // runs what it holds
  delete s;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
// The waiting stream's later work runs after the event's: a held stream's work up to the event
// runs now (an unheld stream's has run already).
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  run_until(e->stream, e->mark);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->at = std::chrono::steady_clock::now();
  e->stream = s;
  e->mark = s ? s->issued : 0;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  run_until(e->stream, e->mark);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
