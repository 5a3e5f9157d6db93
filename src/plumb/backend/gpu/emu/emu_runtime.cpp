// The CUDA emulator's runtime (emu_cuda.h says what it is and is not): memory, streams and events
// as plain host objects, and launches run as blocks of cooperative fibers.
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <unordered_map>
#include <vector>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::emu {
namespace {

constexpr std::size_t kStackBytes = 256 * 1024;  // per thread; touched pages only
// Dynamic shared memory a launch may ask: sm_90's opt-in limit; gfx90a's LDS (the HIP flavour).
#if defined(PLUMB_HIP)
constexpr std::size_t kMaxDynamicShared = 64 * 1024;
#else
constexpr std::size_t kMaxDynamicShared = 227 * 1024;
#endif
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kSlotBytes = 32;  // per lane of a warp collective

// A fiber's saved registers. x86-64: a stack switch of our own (the callee-saved registers, the
// SSE and x87 control words), ~100x cheaper than swapcontext, which makes a system call to save
// the signal mask at every switch (it doubled the emulator's run time); elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void plumb_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl plumb_emu_switch
  .type plumb_emu_switch, @function
plumb_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size plumb_emu_switch, .-plumb_emu_switch
)");

struct Context {
  void* sp = nullptr;
};

// A stack whose first switch "returns" into entry as if called: from the saved sp up, the control
// words, r15 .. rbp (zeros), entry's address, then a null return address for entry, at a place
// that leaves the stack 16-byte aligned minus 8 at entry's first instruction (the ABI's state).
void make_context(Context& c, char* stack, std::size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* w = reinterpret_cast<uint64_t*>(top - 72);
  std::memset(w, 0, 72);
  const uint32_t mxcsr = 0x1F80;  // the default: all exceptions masked, round to nearest
  const uint16_t fpcw = 0x037F;
  std::memcpy(w, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(w) + 4, &fpcw, 2);
  w[7] = reinterpret_cast<uint64_t>(entry);
  c.sp = w;
}
void switch_context(Context& from, Context& to) { plumb_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void make_context(Context& c, char* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

struct Barrier {
  uint64_t gen = 0;
  int arrived = 0;
  int acc = 0, result = 0;  // __syncthreads_or
};

struct AsyncCopy {  // one cp_async16 in flight
  void* dst;
  const void* src;
  bool valid;
};

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  uint3 tid;
  int lin = 0;
  bool done = false;
  std::vector<AsyncCopy> open;                 // issued since the last commit
  std::deque<std::vector<AsyncCopy>> groups;  // committed, not yet waited for (oldest first)
};

using Slots = std::array<std::array<unsigned char, kSlotBytes>, kWarp>;  // a warp collective's lanes

struct WarpState {
  Barrier bar;
  int live = 0;
  std::array<Slots, 2> slots;  // [gen parity][lane]
};

// The running block of this OS thread's launch (fibers run on the thread that launched).
struct Block {
  dim3 grid, block;
  uint3 idx;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  Barrier bar;
  int live = 0;
  uint64_t progress = 0;  // arrivals, releases and exits: a round without any is a deadlock
  unsigned char* smem = nullptr;
  std::size_t smem_bytes = 0;
  Fiber* cur = nullptr;
  Context sched;
};

thread_local Block* g_block = nullptr;
thread_local cudaError_t g_last_error = cudaSuccess;

struct Stacks {
  std::vector<std::unique_ptr<char[]>> s;
  char* get(std::size_t i) {
    while (s.size() <= i) s.emplace_back(new char[kStackBytes]);
    return s[i].get();
  }
};
thread_local Stacks g_stacks;

struct SharedBuffer {
  std::unique_ptr<float4[]> buf;
  std::size_t bytes = 0;
};
thread_local SharedBuffer g_shared;

// PLUMB_EMU_SHUFFLE=<seed>: random block and fiber orders; unset: in order.
std::mt19937_64* shuffle_rng() {
  thread_local std::unique_ptr<std::mt19937_64> rng = [] {
    const char* v = std::getenv("PLUMB_EMU_SHUFFLE");
    return v && *v ? std::make_unique<std::mt19937_64>(std::strtoull(v, nullptr, 10)) : nullptr;
  }();
  return rng.get();
}

void yield() {
  Block& b = *g_block;
  switch_context(b.cur->ctx, b.sched);
}

void release(Barrier& bar) {
  bar.result = bar.acc;
  bar.acc = 0;
  bar.arrived = 0;
  ++bar.gen;
  ++g_block->progress;
}

void release_if_complete(Barrier& bar, int live) {
  if (bar.arrived > 0 && bar.arrived >= live) release(bar);
}

// Arrives at bar (of `live` threads that have not exited) and waits for the others; the OR of
// every arrival's p.
int wait_at(Barrier& bar, const int& live, int p) {
  const uint64_t gen = bar.gen;
  bar.acc |= p;
  ++bar.arrived;
  ++g_block->progress;
  if (bar.arrived >= live) release(bar);
  while (bar.gen == gen) yield();
  return bar.result;
}

// A warp collective's exchange: the calling lane's `bytes` of mine go to its slot, the warp's
// lanes all arrive, and the slots of this exchange come back (every lane's). Two exchanges in a
// row use the two parities, so a lane ahead cannot overwrite what another still reads.
const Slots& exchange(const void* mine, std::size_t bytes) {
  Block& b = *g_block;
  const int lane = b.cur->lin % kWarp;
  WarpState& w = b.warps[static_cast<std::size_t>(b.cur->lin / kWarp)];
  Slots& slots = w.slots[w.bar.gen & 1];
  std::memcpy(slots[static_cast<std::size_t>(lane)].data(), mine, bytes);
  wait_at(w.bar, w.live, 0);
  return slots;
}

// A fiber's whole life; it never returns (its last switch goes to the scheduler for good).
void fiber_main() {
  Block& b = *g_block;
  (*b.body)();
  Fiber& f = *b.cur;
  f.done = true;
  --b.live;
  WarpState& w = b.warps[static_cast<std::size_t>(f.lin / kWarp)];
  --w.live;
  ++b.progress;
  release_if_complete(b.bar, b.live);
  release_if_complete(w.bar, w.live);
  switch_context(f.ctx, b.sched);
  std::abort();  // never resumed
}

[[noreturn]] void deadlock(const Block& b) {
  std::fprintf(stderr,
               "plumb CUDA emulator: block (%u, %u, %u) of grid (%u, %u, %u) x (%u, %u, %u) threads cannot go on: "
               "%d of its threads wait at barriers the others never reach (a __syncthreads or warp collective "
               "under divergent control flow)\n",
               b.idx.x, b.idx.y, b.idx.z, b.grid.x, b.grid.y, b.grid.z, b.block.x, b.block.y, b.block.z, b.live);
  std::abort();
}

void run_block(Block& b, std::mt19937_64* rng) {
  const unsigned n = b.block.x * b.block.y * b.block.z;
  b.fibers.resize(n);
  b.warps.assign((n + kWarp - 1) / kWarp, WarpState{});
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.lin = static_cast<int>(i);
    f.tid = {i % b.block.x, (i / b.block.x) % b.block.y, i / (b.block.x * b.block.y)};
    f.done = false;
    f.open.clear();
    f.groups.clear();
    f.stack = g_stacks.get(i);
    make_context(f.ctx, f.stack, kStackBytes, fiber_main);
    ++b.warps[i / kWarp].live;
  }
  b.live = static_cast<int>(n);
  b.bar = Barrier{};
  // Shared memory starts as garbage on the device: here all-ones bytes (NaN floats, -1 ints).
  if (b.smem_bytes) std::memset(b.smem, 0xFF, b.smem_bytes);
  // One warp at a time: a warp's lanes run (round robin, meeting at its collectives) until every
  // one waits at the block's barrier or has exited, then the next warp. So between two barriers
  // a warp does all its work before the next starts, the most skewed order the device may pick:
  // a write one warp makes that another warp reads, or overwrites while another still reads it,
  // without a barrier between them shows (all warps advancing in step would hide it).
  const unsigned nwarps = static_cast<unsigned>(b.warps.size());
  std::vector<unsigned> warp_order(nwarps), lanes;
  std::iota(warp_order.begin(), warp_order.end(), 0u);
  while (b.live > 0) {
    const uint64_t before = b.progress;
    if (rng) std::shuffle(warp_order.begin(), warp_order.end(), *rng);
    for (unsigned w : warp_order) {
      lanes.resize(std::min<unsigned>(kWarp, n - w * kWarp));
      std::iota(lanes.begin(), lanes.end(), w * kWarp);
      for (uint64_t seen = ~b.progress; seen != b.progress;) {  // until the warp makes no progress
        seen = b.progress;
        if (rng) std::shuffle(lanes.begin(), lanes.end(), *rng);
        for (unsigned i : lanes) {
          Fiber& f = b.fibers[i];
          if (f.done) continue;
          b.cur = &f;
          switch_context(b.sched, f.ctx);
        }
      }
    }
    if (b.progress == before) deadlock(b);
  }
  b.cur = nullptr;
}

std::mutex g_mem_mutex;
std::unordered_map<void*, std::size_t> g_allocations;
std::size_t g_allocated = 0;

std::size_t memory_limit() {
  static const std::size_t limit = [] {
    const char* v = std::getenv("PLUMB_EMU_MEMORY_MB");
    const unsigned long long mb = v && *v ? std::strtoull(v, nullptr, 10) : 4096;
    return static_cast<std::size_t>(mb > 0 ? mb : 4096) << 20;
  }();
  return limit;
}

}  // namespace

const uint3& thread_idx() { return g_block->cur->tid; }
const uint3& block_idx() { return g_block->idx; }
const dim3& block_dim() { return g_block->block; }
const dim3& grid_dim() { return g_block->grid; }
void* dynamic_shared() { return g_block->smem; }
int lane_id() { return g_block->cur->lin % kWarp; }

int config_error(dim3 grid, dim3 block, std::size_t smem) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  const bool bad = threads == 0 || threads > kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 ||
                   grid.z == 0 || grid.y > 65535 || grid.z > 65535 || smem > kMaxDynamicShared;
  return bad ? cudaErrorInvalidConfiguration : 0;
}

int launch(dim3 grid, dim3 block, std::size_t smem, const std::function<void()>& body) {
  if (const int e = config_error(grid, block, smem)) {
    g_last_error = static_cast<cudaError_t>(e);
    return e;
  }
  if (g_block) {
    std::fprintf(stderr, "plumb CUDA emulator: a kernel launched another kernel\n");
    std::abort();
  }
  if (g_shared.bytes < smem) {
    g_shared.buf.reset(new float4[(smem + sizeof(float4) - 1) / sizeof(float4)]);
    g_shared.bytes = smem;
  }
  Block b;
  b.grid = grid;
  b.block = block;
  b.body = &body;
  b.smem = reinterpret_cast<unsigned char*>(g_shared.buf.get());
  b.smem_bytes = smem;
  g_block = &b;
  std::mt19937_64* rng = shuffle_rng();
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  std::vector<unsigned long long> order;
  if (rng) {
    order.resize(blocks);
    std::iota(order.begin(), order.end(), 0ull);
    std::shuffle(order.begin(), order.end(), *rng);
  }
  for (unsigned long long i = 0; i < blocks; ++i) {
    const unsigned long long k = rng ? order[i] : i;
    b.idx = {static_cast<unsigned>(k % grid.x), static_cast<unsigned>(k / grid.x % grid.y),
             static_cast<unsigned>(k / (1ull * grid.x * grid.y))};
    run_block(b, rng);
  }
  g_block = nullptr;
  return cudaSuccess;
}

void syncthreads() { wait_at(g_block->bar, g_block->live, 0); }

void cp_async16(void* smem, const void* gmem, bool valid) {
  std::memset(smem, 0xFF, 16);  // in flight: not yet the copy's bytes
  g_block->cur->open.push_back({smem, gmem, valid});
}

void cp_async_commit() {
  Fiber& f = *g_block->cur;
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}

void cp_async_wait(int pending) {
  Fiber& f = *g_block->cur;
  for (; static_cast<int>(f.groups.size()) > pending; f.groups.pop_front())
    for (const AsyncCopy& c : f.groups.front())
      if (c.valid) std::memcpy(c.dst, c.src, 16);
      else std::memset(c.dst, 0, 16);
}

int syncthreads_or(int p) { return wait_at(g_block->bar, g_block->live, p != 0) != 0; }

void warp_gather(const void* mine, std::size_t bytes, void* all) {
  if (bytes > kSlotBytes) {
    std::fprintf(stderr, "plumb CUDA emulator: a warp gather of %zu bytes a lane (at most %zu)\n", bytes, kSlotBytes);
    std::abort();
  }
  const Slots& slots = exchange(mine, bytes);
  for (int l = 0; l < kWarp; ++l)
    std::memcpy(static_cast<unsigned char*>(all) + static_cast<std::size_t>(l) * bytes,
                slots[static_cast<std::size_t>(l)].data(), bytes);
}

uint64_t warp_shuffle(uint64_t v, int src) {
  uint64_t r;
  std::memcpy(&r, exchange(&v, sizeof v)[static_cast<std::size_t>(src)].data(), sizeof r);
  return r;
}

}  // namespace plumb::gpu::emu

// ---- the runtime API
using plumb::gpu::emu::g_allocated;
using plumb::gpu::emu::g_allocations;
using plumb::gpu::emu::g_last_error;
using plumb::gpu::emu::g_mem_mutex;

cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory (the emulator's PLUMB_EMU_MEMORY_MB)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotSupported: return "operation not supported";
  }
  return "unknown error";
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : (g_last_error = cudaErrorInvalidValue); }

// An H200's shape (sm_90, 132 multiprocessors), so that the backend picks the paths and split
// counts it picks there.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return g_last_error = cudaErrorInvalidValue;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "plumb CUDA emulator on the CPU (not a GPU)");
  p->major = 9, p->minor = 0, p->multiProcessorCount = 132, p->warpSize = plumb::gpu::kWarp;
  p->totalGlobalMem = plumb::gpu::emu::memory_limit();
  p->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrEccEnabled ? 0 : -1;
  return a == cudaDevAttrEccEnabled ? cudaSuccess : (g_last_error = cudaErrorNotSupported);
}
cudaError_t cudaDeviceGetPCIBusId(char* out, int len, int) {
  std::snprintf(out, static_cast<std::size_t>(len), "emulated");
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  *total = plumb::gpu::emu::memory_limit();
  *free = *total - std::min(*total, g_allocated);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  const std::size_t n = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  if (g_allocated + n > plumb::gpu::emu::memory_limit()) return g_last_error = cudaErrorMemoryAllocation;
  *p = ::operator new(n, std::align_val_t{256}, std::nothrow);
  if (!*p) return g_last_error = cudaErrorMemoryAllocation;
  g_allocations[*p] = n;
  g_allocated += n;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  plumb::gpu::emu::run_held_streams();  // cudaFree waits for the device
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  const auto it = g_allocations.find(p);
  if (it == g_allocations.end()) return g_last_error = cudaErrorInvalidValue;
  g_allocated -= it->second;
  g_allocations.erase(it);
  ::operator delete(p, std::align_val_t{256});
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  *p = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{256}, std::nothrow);
  return *p ? cudaSuccess : (g_last_error = cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  if (p) ::operator delete(p, std::align_val_t{256});
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
// At once, after a held stream's queued work (rare: emu_streams.cpp queues the other copies).
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return g_last_error = cudaErrorInvalidValue;
  (void)cudaStreamSynchronize(s);
  for (std::size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }
