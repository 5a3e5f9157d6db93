// GPU backend: device selection, memory (caching allocator, tensors, weight uploads), the memory
// ops of backend.h and launch checking.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "plumb/backend/device_facts.h"
#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/memory.h"
#include "plumb/format/dtype.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess) fail("GPU: {} failed: {} (error {})", what, gpuGetErrorString(e), static_cast<int>(e));
}

namespace {
// Environment switch `name`: the index of its value in `choices`, or -1 when unset or empty; any
// other value fails, naming what was `expected`.
int env_choice(const char* name, std::initializer_list<const char*> choices, const char* expected) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  int i = 0;
  for (const char* c : choices) {
    if (std::strcmp(v, c) == 0) return i;
    ++i;
  }
  fail("{} is '{}': expected {}", name, v, expected);
}

// Environment setting `name`, a whole number in [lo, hi] (`meaning` says of what); `fallback` when
// unset or empty.
int64_t env_count(const char* name, int64_t lo, int64_t hi, int64_t fallback, const char* meaning) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi) fail("{} is '{}': expected {}, {} to {}", name, v, meaning, lo, hi);
  return n;
}
}  // namespace

// ---- allocator

namespace {
constexpr std::size_t kGranule = 512;
std::size_t rounded(std::size_t bytes) { return bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule; }
}  // namespace

DeviceAllocator::~DeviceAllocator() {
  hold_frees(false);
  trim();
}

void* DeviceAllocator::allocate(std::size_t bytes) {
  const std::size_t n = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(n);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      in_use_ += n;
      return p;
    }
  }
  void* p = nullptr;
  if (gpuMalloc(&p, n) != gpuSuccess) {  // out of memory: give the cache back and try once more
    (void)gpuGetLastError();
    trim();
    const gpuError_t e = gpuMalloc(&p, n);
    if (e != gpuSuccess)
      fail("GPU: out of device memory allocating {} bytes ({} bytes in use by tensors): {}", n, in_use_,
           gpuGetErrorString(e));
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ += n;
  return p;
}

void DeviceAllocator::release(void* p, std::size_t bytes) {
  const std::size_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (holding_)
    held_.emplace_back(p, n);
  else
    free_[n].push_back(p);
  in_use_ -= n;
}

void DeviceAllocator::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [n, v] : free_)
    for (void* p : v) (void)gpuFree(p);
  free_.clear();
}

// ---- tensors

namespace {
GpuStorage* storage_of(const Tensor& t, ElemType want, const char* what) {
  if (!t.defined()) fail("{} is undefined", what);
  auto* s = dynamic_cast<GpuStorage*>(t.storage());
  if (!s) fail("{} {} does not live on the GPU backend", what, t.shape_str());
  if (t.type() != want) fail("{} {} has the wrong element type", what, t.shape_str());
  return s;
}

std::string device_unavailable(int* count_out) {
  int n = 0;
  const gpuError_t e = gpuGetDeviceCount(&n);
  if (count_out) *count_out = n;
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    return fmt::format("no usable GPU: {} (error {})", gpuGetErrorString(e), static_cast<int>(e));
  }
  if (n == 0) return "no GPU device found";
  return {};
}
}  // namespace

float* dev_f32(const Tensor& t, const char* what) {
  return static_cast<float*>(storage_of(t, ElemType::F32, what)->ptr);
}
int32_t* dev_i32(const Tensor& t, const char* what) {
  return static_cast<int32_t*>(storage_of(t, ElemType::I32, what)->ptr);
}

void* dev_ptr(const Tensor& t, const char* what) { return storage_of(t, t.type(), what)->ptr; }

k::PagedRef paged_ref(const PagedCache& c, bool used, const char* what) {
  k::PagedRef r;
  r.per_block = used ? c.per_block : 1;
  r.spec = c.spec;
  r.spec.values = c.values();
  if (!used) return r;
  r.pool = static_cast<const uint8_t*>(dev_ptr(c.pool, what));
  r.stride = c.pool.row_size() * 4;
  return r;
}

std::string device_unavailable_reason() { return device_unavailable(nullptr); }

// ---- backend

GpuBackend::GpuBackend() : alloc_(std::make_shared<DeviceAllocator>()) {
  const std::string why = device_unavailable(nullptr);
  if (!why.empty()) fail("the {} backend cannot start: {}", name(), why);
  check(gpuSetDevice(0), "selecting device 0");
  gpuDeviceProp prop{};
  check(gpuGetDeviceProperties(&prop, 0), "reading device properties");
  info_.name = prop.name;
#ifdef PLUMB_HIP
  info_.arch = prop.gcnArchName;
  info_.build = "HIP";
#else
  info_.arch = fmt::format("sm_{}{}", prop.major, prop.minor);
  info_.build = "CUDA";
#endif
#ifdef PLUMB_GPU_TARGETS
  info_.build += std::string(" targets ") + PLUMB_GPU_TARGETS;
#endif
  info_.warp_size = prop.warpSize;
  info_.multiprocessors = prop.multiProcessorCount;
  info_.memory_bytes = prop.totalGlobalMem;
  (void)gpuDriverGetVersion(&info_.driver_version);
  (void)gpuRuntimeGetVersion(&info_.runtime_version);
  if (info_.warp_size != kWarp)
    fail("the {} backend was compiled for {}-wide warps but device '{}' has {}", name(), kWarp, info_.name,
         info_.warp_size);
  check(gpuStreamCreateWithFlags(&stream_, gpuStreamNonBlocking), "creating a stream");
  const char* s = std::getenv("PLUMB_GPU_SYNC");
  sync_each_op_ = s && std::strcmp(s, "0") != 0;
  if (const char* order = std::getenv("PLUMB_GPU_ORDER"); order && *order) cpu_order_sites_ = parse_order(order);
  // The A/B switches (PERF.md) and the portable path; unset or empty: the default stays.
  if (const int c = env_choice("PLUMB_GPU_MOE", {"auto", "per-expert", "grouped-gemm"},
                               "'auto', 'per-expert' or 'grouped-gemm'");
      c >= 0)
    moe_path_ = c == 0 ? MoePath::Auto : c == 1 ? MoePath::PerExpert : MoePath::GroupedGemm;
  if (const int c = env_choice("PLUMB_GPU_ATTN", {"auto", "one-kernel"}, "'auto' or 'one-kernel'"); c >= 0)
    split_attention_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_ATTN_ENTRIES", {"auto", "pool", "always", "chunks"},
                               "'auto' (a prefill chunk's compressed entries decoded once a call, a decode step's "
                               "selected entries once a call), 'pool' (decoded at every read), 'always' (every "
                               "entry once a call, decode steps too) or 'chunks' (a prefill chunk's only)");
      c >= 0) {
    entry_reuse_ = c == 1 ? std::numeric_limits<int64_t>::max() : c == 2 ? 0 : kEntryReuse;
    selected_entries_ = c == 0;
  }
  if (const int c = env_choice("PLUMB_GPU_MOE_MMA", {"auto", "on", "off"},
                               "'auto' (FP4 routed experts on the bf16 tensor cores at decode from 16 tokens, where "
                               "built), 'on' (at any token count) or 'off'");
      c >= 0)
    moe_mma_ = c == 0 ? MoeMma::Auto : c == 1 ? MoeMma::On : MoeMma::Off;
  if (const int c = env_choice("PLUMB_GPU_MOE_TILES", {"1", "2", "4", "8"},
                               "the row tiles a tensor-core expert block takes: '1', '2', '4' (the default) or '8' "
                               "(fewer where they do not divide the rows)");
      c >= 0)
    moe_mma_tiles_ = 1 << c;
  if (const int c = env_choice("PLUMB_GPU_MOE_DEPTH", {"2", "4"},
                               "'2' (the default: a tensor-core expert lane keeps 2 rounds of weights in flight) or "
                               "'4'");
      c >= 0)
    moe_mma_depth_ = 2 << c;
  if (const int c = env_choice("PLUMB_GPU_FP8_TILES", {"auto", "small"},
                               "'auto' (the FP8 GEMM's 128 x 128 tiles from 128 rows) or 'small' (64 x 64 always)");
      c >= 0)
    fp8_large_tiles_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_GEMM_PIPE", {"on", "off"},
                               "'on' (the bf16 GEMM's pipelined k-loop where it applies) or 'off' (its synchronous one)");
      c >= 0)
    gemm_pipe_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_ACT_QUANT", {"norm", "fused", "separate"},
                               "'norm' (the default: a decode step's rms_norm writes the quantized copy its "
                               "consumers read, the others quantize as they stage x), 'fused' (each decode kernel "
                               "quantizes as it stages x) or 'separate' (a launch before it)");
      c >= 0) {
    fused_act_quant_ = c != 2;
    norm_act_fp8_ = c == 0;
  }
  if (const int c = env_choice("PLUMB_GPU_LINEAR_PAIRS", {"on", "off"},
                               "'on' (the default: two 1-row FP8 GEMVs of one x in one launch: wq_a and wkv, wq_b "
                               "and the indexer's, the shared expert's w1 and w3) or 'off' (each its own launch)");
      c >= 0)
    linear_pairs_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_NORM_ROPE", {"on", "off"},
                               "'on' (the default: one launch for a decode step's q, kv and compressed entries) or "
                               "'off' (rms_norm, rope and quant_fp8 each their own launch)");
      c >= 0)
    norm_rope_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_HC_NORM", {"off", "on"},
                               "'off' (hc_pre's or hc_head's mixes and the norm after them in three launches) or "
                               "'on' (two: the mixes' second pass and the norm in one)");
      c >= 0)
    hc_norm_ = c == 1;
  if (const int c = env_choice("PLUMB_GPU_LANES", {"off", "on", "delayed"},
                               "'on' (a decode step's independent chains of ops on two streams), 'off' (one stream) "
                               "or 'delayed' (a test mode: every side chain held back first)");
      c >= 0)
    lanes_ = static_cast<Lanes>(c);
  if (const int c = env_choice("PLUMB_GPU_PATH", {"auto", "portable"},
                               "'auto' (FP8 tensor cores where the device has them) or 'portable' (bf16 matrix cores "
                               "on dequantized weights, as on a GPU without FP8)");
      c >= 0)
    fp8_tensor_cores_ = c == 0;
  fp8_min_rows_ = env_count("PLUMB_GPU_FP8_MIN_ROWS", 2, int64_t{1} << 40, fp8_min_rows_,
                            "the fewest x rows for which FP8 linears take the FP8 tensor cores (fewer: the GEMV)");
  f32_mma_min_blocks_ = env_count("PLUMB_GPU_F32_MMA_MIN_BLOCKS", 0, 1000000, f32_mma_min_blocks_,
                                  "the fewest blocks (after split K) for which Auto takes path (f) (0: the "
                                  "multiprocessors)");
  f32_mma_min_rows_ = env_count("PLUMB_GPU_F32_MMA_MIN_ROWS", 2, k::kF32MmaMaxRows + 1, f32_mma_min_rows_,
                                "the fewest x rows for which Auto takes path (f) (fewer: the GEMV)");
  if (const int c = env_choice("PLUMB_GPU_F32_MMA_PASSES", {"on", "off"},
                               "'on' (a tall weight's f32 linear of 65 to 256 x rows on path (f) in passes of 64) "
                               "or 'off' (path (g))");
      c >= 0)
    f32_mma_passes_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_F32_MMA_FP8", {"on", "off"},
                               "'on' (path (f) also for FP8 weights and bf16 outputs) or 'off'");
      c >= 0)
    f32_mma_fp8_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_X_PARTS", {"on", "off"},
                               "'on' (path (g): f32 linears of many rows on the bf16 GEMM over x's three exact bf16 "
                               "parts) or 'off' (the SIMT GEMM)");
      c >= 0)
    x_parts_ = c == 0;
  if (const int c = env_choice("PLUMB_GPU_SCORES_MMA", {"on", "off"},
                               "'on' (sparse-attention scores of 16 query rows and more on the matrix unit, the fast "
                               "order) or 'off' (summed in the CPU's order)");
      c >= 0)
    scores_mma_ = c == 0;
  pv_mma_rows_ = env_count("PLUMB_GPU_ATTN_MMA_ROWS", 1, int64_t{1} << 40, pv_mma_rows_,
                           "the query rows from which sparse attention takes the matrix unit (the fast order)");
  pv_heads_ = static_cast<int>(env_count("PLUMB_GPU_PV_HEADS", 0, 8, pv_heads_,
                                          "the most heads a sparse-attention P.V block takes (0: by the batch's size)"));
  scores_span_ = static_cast<int>(env_count("PLUMB_GPU_SCORES_SPAN", 0, 4, scores_span_,
                                             "candidate tiles a sparse-attention scores block takes (0: by the batch's size)"));
}

unsigned GpuBackend::parse_order(const std::string& order) {
  if (order == "cpu") return kAllSites;
  if (order == "fast") return 0;
  static constexpr std::pair<const char*, OrderSite> kSites[] = {
      {"linear", kLinear}, {"norm", kNorm}, {"hc", kHc}, {"gate", kGate}, {"mla", kMla}, {"attn", kAttn}};
  unsigned sites = 0;
  std::size_t at = 0;
  while (at <= order.size()) {
    const std::size_t end = std::min(order.find(',', at), order.size());
    const std::string site = order.substr(at, end - at);
    const auto* hit = std::find_if(std::begin(kSites), std::end(kSites), [&](const auto& s) { return site == s.first; });
    if (hit == std::end(kSites))
      fail("PLUMB_GPU_ORDER is '{}': expected 'cpu' (sums in the CPU backend's order, bitwise results), 'fast', or a "
           "comma list of the sites summed in the CPU's order (linear, norm, hc, gate, mla, attn); '{}' is none of them",
           order, site);
    sites |= hit->second;
    at = end + 1;
  }
  return sites;
}

GpuBackend::~GpuBackend() {
  if (side_ == Side::Running) stream_ = main_stream_;  // (an op of a side chain threw)
  if (stream_) (void)gpuStreamSynchronize(stream_);
  if (side_stream_) (void)gpuStreamSynchronize(side_stream_);
  for (auto& [key, w] : weights_) {
    (void)gpuFree(w.data);
    if (w.scale) (void)gpuFree(w.scale);
  }
  if (stream_) (void)gpuStreamDestroy(stream_);
  if (side_stream_) (void)gpuStreamDestroy(side_stream_);
  if (fork_event_) (void)gpuEventDestroy(fork_event_);
  if (side_done_event_) (void)gpuEventDestroy(side_done_event_);
}

std::string GpuBackend::name() const {
#ifdef PLUMB_HIP
  return "hip";
#else
  return "cuda";
#endif
}

std::vector<std::pair<std::string, std::string>> GpuBackend::facts() const {
  // The runtime's own encoding (HIP's is not CUDA's): the one decoding plumb doctor uses.
  auto version = [this](int v) {
    const std::string text = gpu_version_text(name(), v);
    return text.empty() ? std::string("?") : text;
  };
  return {{"backend", name()},
          {"device", info_.name},
          {"arch", info_.arch},
          {"multiprocessors", std::to_string(info_.multiprocessors)},
          {"warp_size", std::to_string(info_.warp_size)},
          {"memory_gib", fmt::format("{:.1f}", static_cast<double>(info_.memory_bytes) / (1ull << 30))},
          {"driver_version", version(info_.driver_version)},
          {"runtime_version", version(info_.runtime_version)},
          {"build", info_.build},
          {"linear_path", fp8_tensor_cores() ? "FP8 tensor cores for FP8 weights"
                                             : "portable (bf16 matrix cores on dequantized weights)"},
          {"reduction_order", cpu_order() ? "cpu (bitwise the CPU backend)" : cpu_order_sites_ ? fmt::format("cpu at sites {:#x}, else fast", cpu_order_sites_) : "fast"}};
}

void GpuBackend::check_launch(gpuError_t launched, const char* kernel) {
  check(launched, kernel);
  if (sync_each_op_) check(gpuStreamSynchronize(stream_), kernel);
}

void GpuBackend::sync() {
  check(gpuStreamSynchronize(stream_), "stream synchronize");
  if (side_ == Side::Running || side_ == Side::Done)  // and the other chain's stream (gpu_lanes.cpp)
    check(gpuStreamSynchronize(stream_ == side_stream_ ? main_stream_ : side_stream_), "side stream synchronize");
  if (attn_err_pending_) check_attention_errors();
}

void GpuBackend::profile_capture(bool on) {
  sync();
#ifdef PLUMB_CUDA
  check(on ? cudaProfilerStart() : cudaProfilerStop(), on ? "starting the profiler's capture" : "stopping the profiler's capture");
#else
  (void)on;  // HIP's hipProfilerStart / Stop are deprecated (rocprof has range controls of its own)
#endif
}

void GpuBackend::copy_in(void* dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes == 0 || staging_.upload(dst, src, bytes, stream_)) return;
  check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, stream_), what);
  check(gpuStreamSynchronize(stream_), what);  // the caller's buffer may go away after we return
}

Tensor GpuBackend::alloc(ElemType type, Shape shape) {
  const int64_t n = backend::element_count(shape);
  auto s = std::make_shared<GpuStorage>(alloc_, static_cast<std::size_t>(n) * 4);
  Tensor t(std::move(s), type, std::move(shape));
  if (poison_ && n > 0)
    check_launch(type == ElemType::F32 ? k::fill_f32(dev_f32(t), n, bits_f32(0x7FC00000u), stream_)
                                       : k::fill_i32(dev_i32(t), n, INT32_MIN, stream_),
                 "poison");
  return t;
}

Tensor GpuBackend::upload(const void* data, std::size_t bytes) {
  Tensor t = alloc(ElemType::I32, {static_cast<int64_t>((bytes + 3) / 4)});
  copy_in(dev_ptr(t), data, bytes, "upload");
  return t;
}

// ---- weights

namespace {
WFormat wformat(const WeightView& w) {
  switch (w.format) {
    case WeightFormat::FP8Block128: return WFormat::FP8;
    case WeightFormat::FP4Block32: return WFormat::FP4;
    case WeightFormat::Dense:
      if (w.dtype == DType::F32) return WFormat::F32;
      if (w.dtype == DType::BF16) return WFormat::BF16;
      break;
  }
  fail("GPU backend: weight '{}' has format {} / dtype {}, which it cannot use (expected F32, BF16, FP8 128x128 or "
       "FP4 1x32)",
       w.name, weight_format_name(w.format), dtype_name(w.dtype));
}
}  // namespace

namespace {
uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }  // FNV-1a step

uint64_t fingerprint(const WeightView& w, std::size_t data_bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  h = mix(h, static_cast<uint64_t>(w.format));
  h = mix(h, static_cast<uint64_t>(w.dtype));
  h = mix(h, reinterpret_cast<uintptr_t>(w.scale));
  for (int64_t d : w.shape) h = mix(h, static_cast<uint64_t>(d));
  const auto* b = reinterpret_cast<const unsigned char*>(w.data);
  constexpr std::size_t kSamples = 64;
  for (std::size_t i = 0; i < kSamples && data_bytes > 0; ++i) h = mix(h, b[i * (data_bytes - 1) / (kSamples - 1)]);
  return h;
}

std::size_t logical_bytes(const WeightView& w) {
  switch (w.format) {
    case WeightFormat::FP8Block128: return static_cast<std::size_t>(w.numel());
    case WeightFormat::FP4Block32: return static_cast<std::size_t>(w.numel() / 2);
    case WeightFormat::Dense: break;
  }
  return static_cast<std::size_t>(w.numel()) * dtype_size(w.dtype);
}
}  // namespace

const WeightRef& GpuBackend::weight(const WeightView& w) {
  if (!w.present()) fail("GPU backend: weight '{}' has no data", w.name);
  const uint64_t fp = fingerprint(w, logical_bytes(w));
  auto it = weights_.find(w.data);
  if (it != weights_.end()) {
    if (it->second.fingerprint == fp) return it->second.ref;
    sync();  // kernels in flight may still read the old copy
    expert_tables_.clear();  // they hold the old device addresses
    (void)gpuFree(it->second.data);
    if (it->second.scale) (void)gpuFree(it->second.scale);
    weights_.erase(it);
  }
  OwnedWeight o;
  o.fingerprint = fp;
  WeightRef& r = o.ref;
  r.format = wformat(w);
  r.rows = w.shape.empty() ? 1 : (w.shape.size() == 1 ? w.shape[0] : w.rows());
  r.cols = w.shape.size() <= 1 ? 1 : w.cols();
  std::size_t data_bytes = 0, scale_bytes = 0;
  switch (r.format) {
    case WFormat::F32: data_bytes = static_cast<std::size_t>(r.rows * r.cols) * 4; break;
    case WFormat::BF16: data_bytes = static_cast<std::size_t>(r.rows * r.cols) * 2; break;
    case WFormat::FP8:
      data_bytes = static_cast<std::size_t>(r.rows * r.cols);
      r.scale_cols = (r.cols + 127) / 128;
      r.scale_f32 = w.scale_dtype == DType::F32;
      if (!r.scale_f32 && w.scale_dtype != DType::F8_E8M0)
        fail("GPU backend: FP8 weight '{}' has {} scales (expected F8_E8M0 or F32)", w.name, dtype_name(w.scale_dtype));
      scale_bytes = static_cast<std::size_t>((r.rows + 127) / 128 * r.scale_cols) * (r.scale_f32 ? 4 : 1);
      break;
    case WFormat::FP4:
      data_bytes = static_cast<std::size_t>(r.rows * r.cols / 2);
      r.scale_cols = (r.cols + 31) / 32;
      scale_bytes = static_cast<std::size_t>(r.rows * r.scale_cols);
      break;
  }
  if ((r.format == WFormat::FP8 || r.format == WFormat::FP4) && !w.scale)
    fail("GPU backend: quantized weight '{}' has no scales", w.name);
  // On the backend's stream (copy_in): a plain gpuMemcpy from pageable memory may return before
  // its DMA has landed, and the non-blocking stream_ does not wait for it, so the first kernels
  // read a weight's tail stale (seen on the H200: the last ~93 logit rows of a fresh backend's
  // first forward, GpuCpuOrderShapes; the "moving error" of issue 13 item 3).
  check(gpuMalloc(&o.data, data_bytes), "allocating a weight");
  copy_in(o.data, w.data, data_bytes, "uploading a weight");
  if (scale_bytes) {
    check(gpuMalloc(&o.scale, scale_bytes), "allocating weight scales");
    copy_in(o.scale, w.scale, scale_bytes, "uploading weight scales");
  }
  r.data = static_cast<const uint8_t*>(o.data);
  r.scale = static_cast<const uint8_t*>(o.scale);
  return weights_.emplace(w.data, o).first->second.ref;
}

// ---- memory ops

Tensor GpuBackend::full(ElemType type, Shape shape, float value) {
  Tensor t = alloc(type, std::move(shape));
  const int64_t n = t.numel();
  if (n == 0) return t;
  check_launch(type == ElemType::F32 ? k::fill_f32(dev_f32(t), n, value, stream_)
                                     : k::fill_i32(dev_i32(t), n, static_cast<int32_t>(value), stream_),
               "full");
  return t;
}

Tensor GpuBackend::from_host(const float* data, Shape shape) {
  Tensor t = alloc(ElemType::F32, std::move(shape));
  copy_in(dev_f32(t), data, static_cast<std::size_t>(t.numel()) * 4, "copy to device");
  return t;
}

Tensor GpuBackend::from_host(const int32_t* data, Shape shape) {
  Tensor t = alloc(ElemType::I32, std::move(shape));
  copy_in(dev_i32(t), data, static_cast<std::size_t>(t.numel()) * 4, "copy to device");
  return t;
}

void GpuBackend::to_host(const Tensor& t, float* out) {
  check(gpuMemcpyAsync(out, dev_f32(t), static_cast<std::size_t>(t.numel()) * 4, gpuMemcpyDeviceToHost, stream_),
        "copy to host");
  sync();
}

void GpuBackend::to_host(const Tensor& t, int32_t* out) {
  check(gpuMemcpyAsync(out, dev_i32(t), static_cast<std::size_t>(t.numel()) * 4, gpuMemcpyDeviceToHost, stream_),
        "copy to host");
  sync();
}

const float* GpuBackend::act_fp8_copy(const Tensor& x, int64_t row) {
  GpuStorage* s = storage_of(x, ElemType::F32, "act_fp8 input");
  if (!s->act_fp8.defined() || s->act_fp8.dim(-1) != row || x.numel() != s->act_fp8.numel()) return nullptr;
  ++act_fp8_copy_reads_;
  return dev_f32(s->act_fp8);
}

void GpuBackend::copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  check_copy_rows(dst, dst_row, src, src_row, n);
  const int64_t rs = dst.row_size();
  GpuStorage* ds = storage_of(dst, dst.type(), "copy_rows destination");
  ds->act_fp8 = Tensor();  // its values change
  auto* d = static_cast<char*>(ds->ptr);
  auto* s = static_cast<const char*>(storage_of(src, src.type(), "copy_rows source")->ptr);
  if (n == 0 || rs == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(n * rs) * 4;
  char* to = d + dst_row * rs * 4;
  const char* from = s + src_row * rs * 4;
  if (to < from + bytes && from < to + bytes && to != from) {  // overlapping rows: memmove semantics
    Tensor tmp = alloc(src.type(), {n, rs});
    void* t = storage_of(tmp, tmp.type(), "copy_rows scratch")->ptr;
    check(gpuMemcpyAsync(t, from, bytes, gpuMemcpyDeviceToDevice, stream_), "copy_rows");
    from = static_cast<const char*>(t);
  }
  check(gpuMemcpyAsync(to, from, bytes, gpuMemcpyDeviceToDevice, stream_), "copy_rows");
}

}  // namespace plumb::gpu

namespace plumb::backend {
std::unique_ptr<Backend> make_gpu_backend() { return std::make_unique<gpu::GpuBackend>(); }
std::string gpu_unavailable_reason() { return gpu::device_unavailable_reason(); }
}  // namespace plumb::backend
