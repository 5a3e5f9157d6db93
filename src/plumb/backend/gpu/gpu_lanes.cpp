// GpuBackend::side_begin / side_end / join (backend.h): two independent chains of a decode step
// on two streams. Why: at decode batches most ops are one-block chains or GEMVs of 8-50 us whose
// ramp and tail leave HBM idle (PERF.md v36-v38); an independent chain beside them (the shared
// expert beside the routed ones, a layer's compressors beside its q path) fills that idle time
// with bytes the step must read anyway.
//
// Ordering: the side stream waits for an event recorded on the main stream at side_begin (so it
// sees everything issued before), and join() makes the main stream wait for an event recorded at
// side_end. Memory: while the chains may overlap, no freed block is reused (DeviceAllocator's
// hold): a block the main chain freed may still be read by a main kernel the side chain would
// overtake, and the reverse; the held blocks return to the free lists at join(), after which
// every later op is ordered behind both chains. Staging uploads are per stream (their events).
#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/memory.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

void GpuBackend::side_begin(int64_t rows) {
  if (side_ != Side::Idle) fail("GPU backend: side_begin() inside a side chain (one chain at a time, then join())");
  if (lanes_ == Lanes::Off || rows > kSideRows) {
    side_ = Side::Inline;
    return;
  }
  if (!side_stream_) {
    check(gpuStreamCreateWithFlags(&side_stream_, gpuStreamNonBlocking), "creating the side stream");
    check(gpuEventCreateWithFlags(&fork_event_, gpuEventDisableTiming), "creating the side chain's fork event");
    check(gpuEventCreateWithFlags(&side_done_event_, gpuEventDisableTiming), "creating the side chain's end event");
  }
#if defined(PLUMB_EMU)
  emu::hold_stream(side_stream_, lanes_ == Lanes::Delayed);  // the emulator's form of the delay
#endif
  check(gpuEventRecord(fork_event_, stream_), "side chain: recording the fork");
  check(gpuStreamWaitEvent(side_stream_, fork_event_, 0), "side chain: waiting for the fork");
  alloc_->hold_frees(true);
  main_stream_ = stream_;
  stream_ = side_stream_;
  side_ = Side::Running;
  ++side_chains_;
  if (lanes_ == Lanes::Delayed) check_launch(k::spin(kSideDelayCycles, stream_), "side chain delay (test mode)");
}

void GpuBackend::side_end() {
  if (side_ == Side::Inline) {
    side_ = Side::InlineDone;
    return;
  }
  if (side_ != Side::Running) fail("GPU backend: side_end() without side_begin()");
  check(gpuEventRecord(side_done_event_, stream_), "side chain: recording its end");
  stream_ = main_stream_;
  side_ = Side::Done;
}

void GpuBackend::join() {
  if (side_ == Side::Idle) return;  // nothing forked
  if (side_ == Side::Running) side_end();
  if (side_ == Side::Done) {
    check(gpuStreamWaitEvent(stream_, side_done_event_, 0), "side chain: joining");
    alloc_->hold_frees(false);
  }
  side_ = Side::Idle;
}

void DeviceAllocator::hold_frees(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  holding_ = on;
  if (on) return;
  for (const auto& [p, n] : held_) free_[n].push_back(p);
  held_.clear();
}

}  // namespace plumb::gpu
