#pragma once
// The GPU backend (CUDA and HIP from the same sources, ARCHITECTURE ideas 1, 5, 7): every op of
// backend.h on device memory. Activations are f32 device tensors (Round::BF16 rounds their values,
// as on the CPU); weights are uploaded once, in their checkpoint formats, keyed by the view's data
// pointer (a WeightView's bytes must outlive the backend: they do for a mapped checkpoint), and
// decoded in registers. Ops are spread over files by topic like the CPU backend's:
// gpu_memory.cpp (memory, weights, launch checks), gpu_elementwise.cpp, gpu_linear.cpp, gpu_hc.cpp,
// gpu_compress.cpp (compressor + indexer), gpu_attention.cpp (sparse + MLA attention), gpu_moe.cpp.
// Those .cpp files hold the host side (shape checks, errors, orchestration) and call launchers
// declared in kernels/*.h; the kernels themselves live in kernels/*.cu, which include no plumb
// host headers (nvcc cannot compile fmt), only gpu_compat.h, gpu_numerics.h and weight_ref.h.
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/backend/device_facts.h"
#include "plumb/backend/op_checks.h"
#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_staging.h"
#include "plumb/backend/gpu/kernels/hc.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"
#include "plumb/backend/gpu/kernels/paged.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu {
namespace k {
struct AttnError;
}

using namespace plumb::backend;

// Stream-ordered caching allocator: freed blocks go back to a per-size free list and are reused
// by later allocations on the same stream (safe without a sync: the stream orders the uses).
class DeviceAllocator {
 public:
  ~DeviceAllocator();
  void* allocate(std::size_t bytes);
  void release(void* p, std::size_t bytes);
  void trim();  // frees every cached block
  // While held, freed blocks wait in a list instead of the free lists, and go there when the hold
  // ends: a block one stream freed is never handed to the other while two streams run
  // (GpuBackend::side_begin .. join, gpu_lanes.cpp).
  void hold_frees(bool on);
  std::size_t in_use() const { return in_use_; }
  std::size_t cached();  // bytes in the free lists, held for reuse

 private:
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::vector<std::pair<void*, std::size_t>> held_;  // (block, rounded size) freed under hold_frees
  bool holding_ = false;
  std::size_t in_use_ = 0;
};

struct GpuStorage final : Storage {
  GpuStorage(std::shared_ptr<DeviceAllocator> a, std::size_t bytes) : alloc(std::move(a)), bytes(bytes) {
    ptr = alloc->allocate(bytes);
  }
  ~GpuStorage() override { alloc->release(ptr, bytes); }
  std::shared_ptr<DeviceAllocator> alloc;
  std::size_t bytes = 0;
  void* ptr = nullptr;
  // The FP8 round trip (act_fp8's 1 x 128 blocks, rows of act_fp8.dim(-1)) of these values, where
  // the op that wrote them wrote it too (a decode step's rms_norm: GpuBackend::set_norm_act_fp8);
  // linear() and moe() read it instead of quantizing again. An op that writes into a storage in
  // place (copy_rows, copy_row_runs) drops it.
  Tensor act_fp8;
};

// Facts about the device and the build, for reports (plumb verify) and error messages.
struct DeviceInfo {
  std::string name, arch;  // e.g. "NVIDIA H200", "sm_90" / "gfx90a"
  int driver_version = 0, runtime_version = 0;
  int warp_size = 0, multiprocessors = 0;
  std::size_t memory_bytes = 0;
  std::string build;  // platform and target list the kernels were compiled for
};

class GpuBackend final : public Backend {
 public:
  GpuBackend();
  ~GpuBackend() override;
  std::string name() const override;
  std::vector<std::pair<std::string, std::string>> facts() const override;
  backend::DeviceMemory memory() const;  // gpu_device_facts.cpp
  const DeviceInfo& info() const { return info_; }
  gpuStream_t stream() const { return stream_; }

  // ---- helpers for the op files
  // A new tensor. Its contents are undefined, or NaN (f32) / INT32_MIN (i32) everywhere when
  // poisoning is on (the op tests turn it on, so an element an op never writes shows up).
  Tensor alloc(ElemType type, Shape shape);
  void set_poison(bool on) { poison_ = on; }
  // Copies `bytes` host bytes (e.g. an array of per-sequence device pointers or offsets) to a
  // new device buffer and returns it (as an I32 tensor of ceil(bytes/4) elements); synchronous.
  Tensor upload(const void* data, std::size_t bytes);
  // dst (device) <- src (host) on the stream; returns before the copy is done (pinned staging,
  // gpu_staging.h), synchronously only where pinned memory is unavailable or bytes are many.
  void copy_in(void* dst, const void* src, std::size_t bytes, const char* what);
  // The device copy of a weight (uploaded on first use, keyed by the view's data pointer). A cheap
  // fingerprint (format, shape, scale pointer, 64 sampled bytes) guards the key: host memory
  // freed and reused for another weight (tests do this) is uploaded again, never served stale.
  const WeightRef& weight(const WeightView& w);
  // Checks a launcher's result (kernels/*.h); with PLUMB_GPU_SYNC=1 in the environment also
  // waits for the stream, so an asynchronous fault is reported at the op that caused it.
  void check_launch(gpuError_t launched, const char* kernel);
  void sync();
  // linear()'s kernel: Auto picks GEMV for few rows, else the SIMT f32 GEMM (reference profile)
  // or the bf16 tensor-core GEMM (faithful profile); tests and benchmarks can force one. XParts:
  // path (g), the bf16 GEMM over x's three exact bf16 parts (kernels/linear.h).
  enum class LinearPath { Auto, Gemv, Simt, Mma, Fp8, CpuOrder, F32Mma, XParts };
  void set_linear_path(LinearPath p) { linear_path_ = p; }
  // The kernel linear_on(x, w, o, path) runs for N rows of x against wr (K columns, R rows per
  // group): path itself unless Auto, else the choice by size, format and order described there.
  LinearPath resolve_linear_path(LinearPath path, int64_t N, const WeightRef& wr, const LinearOpts& o, int64_t K,
                                 int64_t R) const;
  // moe()'s routed experts: Auto runs the grouped kernels (routing read on the device, one
  // launch per projection for all experts) for at most kGroupedMoeMaxSlots token slots in the
  // fast order; for more, the grouped GEMMs (moe_prefill: one bf16 GEMM launch per projection for
  // every expert whose own linear() would take the bf16 GEMM, bitwise the same values), the other
  // experts one by one; else expert by expert. PerExpert: always expert by expert (each expert's
  // GEMMs through linear()); GroupedGemm: the grouped GEMMs at any slot count, never the decode
  // kernels (tests; PLUMB_GPU_MOE=auto|per-expert|grouped-gemm at start).
  enum class MoePath { Auto, PerExpert, GroupedGemm };
  void set_moe_path(MoePath p) { moe_path_ = p; }
  // sparse_attention(): the split kernels for decode-sized batches (default), or the one-kernel
  // form always (tests cover both; PLUMB_GPU_ATTN=one-kernel at start, for A/B measurements).
  void set_split_attention(bool on) { split_attention_ = on; }
  // The grouped experts' tensor-core form (kernels/moe_mma.cu: FP4 experts under act_fp8, CUDA):
  // Auto where it applies from kMoeMmaMinTokens tokens (the SIMT kernels below: H100, B = 1 and 8
  // +0.04 ms a step on tensor cores, B = 16 even, B = 32 -0.55; PERF.md v20), On at any token
  // count (tests), Off never (PLUMB_GPU_MOE_MMA=auto|on|off at start: A/B).
  enum class MoeMma { Auto, On, Off };
  static constexpr int64_t kMoeMmaMinTokens = 16;
  void set_moe_mma(MoeMma m) { moe_mma_ = m; }
  // Its up and down kernels' shape (GroupedMoeArgs::mma_tiles, mma_depth): row tiles a block walks
  // (1, 2, 4 or 8) and rounds of 128 columns in flight a lane (2 or 4). Every shape gives the same
  // bits (tests compare them); the default 4 tiles, 2 rounds (PERF.md v39, H100: B = 32 step
  // -0.3 ms against 1 tile). PLUMB_GPU_MOE_TILES and PLUMB_GPU_MOE_DEPTH at start: the A/B. Another
  // shape fails the launch.
  static constexpr int kMoeMmaTiles = 4, kMoeMmaDepth = 2;
  void set_moe_mma_shape(int tiles, int depth) { moe_mma_tiles_ = tiles, moe_mma_depth_ = depth; }
  // The FP8 tensor-core GEMM's large tiles from 128 rows of x (default), or its small tiles at
  // every size (PLUMB_GPU_FP8_TILES=small at start: the A/B; tests compare the two bitwise).
  void set_fp8_large_tiles(bool on) { fp8_large_tiles_ = on; }
  // Path (c)'s pipelined k-loop where it applies (default), or its synchronous one always
  // (PLUMB_GPU_GEMM_PIPE=off at start: the A/B; tests compare the two bitwise).
  void set_gemm_pipe(bool on) { gemm_pipe_ = on; }
  // How many path (c) launches took the pipelined k-loop (tests check that it ran).
  int64_t gemm_pipe_calls() const { return gemm_pipe_calls_; }
  int64_t x_parts_calls() const { return x_parts_calls_; }  // path (g) launches (tests)
  int64_t f32_mma_calls() const { return f32_mma_calls_; }  // path (f) launches (tests)
  // Path (f) in passes of 64 rows for 65 to kF32MmaPassesMaxRows x rows of a tall weight (the
  // head at B = 65-256; gpu_linear.cpp). set_f32_mma_passes / PLUMB_GPU_F32_MMA_PASSES=off: path
  // (g) there, as before (A/B).
  static constexpr int64_t kF32MmaPassesMaxRows = 256;
  void set_f32_mma_passes(bool on) { f32_mma_passes_ = on; }
  // How many moe() calls the tensor-core form has served (tests check that it ran).
  int64_t moe_mma_calls() const { return moe_mma_calls_; }
  // The most heads one P.V block of the split kernels takes (1, 2, 4 or 8); 0: by the batch's size.
  void set_pv_heads(int heads) { pv_heads_ = heads; }
  // Candidate tiles of 8 one split scores block takes (1-4); 0: by the launch's size (4 from
  // 4,096 one-tile blocks, else 1). Tests force 4 on small cases; PLUMB_GPU_SCORES_SPAN (A/B).
  void set_scores_span(int tiles) { scores_span_ = tiles; }
  // The split form's P.V on the matrix unit (kernels/sparse_attention_pv_mma.cu) from this many
  // query rows (default kPvMmaRowsFrom: decode batches of 16 and more, and prefill chunks), in the
  // fast order with bf16 probabilities (the faithful profile) and head dims a multiple of 64;
  // below it, and with the attn site in the CPU's order, the bitwise P.V. 16 since PERF.md v41
  // (H100, B = 32 step -0.4 ms; 8 the same within noise, 1 slower at B = 1-4); the fast order's
  // values already depend on the batch, as the experts' tensor cores from 16 tokens. Tests force
  // it at any row count; PLUMB_GPU_ATTN_MMA_ROWS at start (A/B).
  static constexpr int64_t kPvMmaRowsFrom = 16;
  void set_pv_mma_rows(int64_t rows) { pv_mma_rows_ = rows; }
  // How many sparse_attention() launches took the P.V on the matrix unit (tests check that it ran).
  int64_t pv_mma_calls() const { return pv_mma_calls_; }
  // The scores on the matrix unit (kernels/sparse_attention_scores_mma.cu) where the P.V's rule
  // holds (without the bf16 probabilities); PLUMB_GPU_SCORES_MMA=off (the A/B) keeps the bitwise
  // scores. scores_mma_calls(): launches that took them.
  void set_scores_mma(bool on) { scores_mma_ = on; }
  int64_t scores_mma_calls() const { return scores_mma_calls_; }
  // sparse_attention() decodes an encoded pool's entries once into f32 rows (one launch before the
  // attention's) when its rows read at least this many times as many entry rows as the call has
  // entries (query rows x selected or visible entries >= reuse x entries) and they fit 256 MiB: a
  // prefill chunk, not a decode batch (which reads few of a long context's entries). The P.V on the
  // matrix unit reads decoded entries only (with an encoded pool). The same values either way (tests
  // compare both bitwise; 0: always). PLUMB_GPU_ATTN_ENTRIES=pool at start: never (also no
  // selected rows, below); =always: 0 (A/Bs).
  static constexpr int64_t kEntryReuse = 8;
  void set_entry_reuse(int64_t reuse) { entry_reuse_ = reuse; }
  int64_t decoded_entry_calls() const { return decoded_entry_calls_; }
  // When on (the default), a call that does not decode its entries whole but has a selection
  // (decode steps) decodes each query row's selected entries once into f32 rows ([N, K, Dh],
  // within the same 256 MiB): at B = 1 each of the split P.V's 64 one-head blocks decoded every
  // fp8 entry again (PERF.md v31); v32 measured -22..-38 us a step at context 512, -134 us at
  // 32K, -90 us at B = 32. PLUMB_GPU_ATTN_ENTRIES=chunks or pool at start: off (the A/B). The same
  // values (tests compare bitwise).
  void set_selected_entries(bool on) { selected_entries_ = on; }
  int64_t selected_entry_calls() const { return selected_entry_calls_; }
  // act_fp8 (FP8 round trip of a linear's input) on the decode kernels: the GEMV and the grouped
  // experts apply it while staging their input (fused, the default), or a quant_blocks launch
  // writes a quantized copy first (separate; PLUMB_GPU_ACT_QUANT=separate at start, for A/B
  // measurements). The same values either way (tests compare them bitwise).
  void set_fused_act_quant(bool on) { fused_act_quant_ = on; }
  // When on, rms_norm of at most kNormActFp8Rows rows (a decode step's) also writes the act_fp8
  // copy of its output (k::rms_norm_act_fp8_ok's widths), and the linears and routed experts that
  // apply act_fp8 to that output read the copy: no staging in each consumer (4-6 us a GEMV at
  // B = 1, PERF.md v13) and no launch. On by default (PERF.md v32-v33, measured: -20 to -30 us a
  // B = 1 step); PLUMB_GPU_ACT_QUANT=fused at start turns it off (an A/B). The same values (tests
  // compare bitwise). act_fp8_copy_reads(): the consumers that read a copy.
  static constexpr int64_t kNormActFp8Rows = 8;
  void set_norm_act_fp8(bool on) { norm_act_fp8_ = on; }
  // When on, linear_pair() gives two 1-row FP8 GEMVs of one x one launch (k::linear_gemvs): a
  // decode step's wq_a and wkv, a CSA layer's wq_b and the indexer's, the shared expert's w1 and
  // w3. On by default (PERF.md v33, measured: -25 to -38 us a B = 1 step); PLUMB_GPU_LINEAR_PAIRS=off
  // at start turns it off (an A/B). The same values (tests compare bitwise).
  // linear_pair_launches(): the pairs that took one launch.
  void set_linear_pairs(bool on) { linear_pairs_ = on; }
  int64_t linear_pair_launches() const { return linear_pair_launches_; }
  // When on, norm_rope() is one launch (k::norm_rope) where its kernel takes the shape: a decode
  // step's q, kv and compressed entries, instead of a norm, two copies and two kernels.
  // On by default (PERF.md v34, measured: -40 us a B = 1 step); PLUMB_GPU_NORM_ROPE=off at start
  // turns it off (an A/B). The same values (tests compare bitwise). norm_rope_launches(): the
  // calls that took the one launch.
  void set_norm_rope(bool on) { norm_rope_ = on; }
  int64_t norm_rope_launches() const { return norm_rope_launches_; }
  // When on, hc_pre_norm() and hc_head_norm() are two launches (k::hc_mix_norm: pass 1, then pass
  // 2 and the norm in one block a token) instead of three, where its kernel takes the shape (fast
  // order in both).
  // PLUMB_GPU_HC_NORM=on at start (an A/B, off until measured: PERF.md v36). The same values
  // (tests compare bitwise). hc_norm_launches(): the calls that took it.
  void set_hc_norm(bool on) { hc_norm_ = on; }
  int64_t hc_norm_launches() const { return hc_norm_launches_; }
  int64_t act_fp8_copy_reads() const { return act_fp8_copy_reads_; }
  // side_begin / side_end / join (backend.h; gpu_lanes.cpp): for at most kSideRows rows (decode
  // batches, whose ops leave most of the device idle), the side chain runs on a second stream
  // that starts where the main one stands, and join() makes the main stream wait for it.
  // PLUMB_GPU_LANES=on|off|delayed at start; delayed (a test mode) holds every side chain back
  // ~kSideDelayCycles first (on the emulator: holds the side stream's work until the join,
  // emu_cuda.h), so a missing join shows up as different values, not as a rare race.
  // On by default since PERF.md v40's lease (H100: B = 8 and 32 -60 to -100 us a step, B = 1
  // within noise); off: one stream, ops in issue order. The same values (tests compare bitwise).
  // side_chains(): the chains that took the second stream.
  enum class Lanes { Off, On, Delayed };
  static constexpr int64_t kSideRows = 64;
  static constexpr int64_t kSideDelayCycles = 200000;
  void set_lanes(Lanes l) { lanes_ = l; }
  int64_t side_chains() const { return side_chains_; }
  void side_begin(int64_t rows) override;
  void side_end() override;
  void join() override;
  // Whether FP8 linears may take the FP8 tensor cores here: sm_90 with the sm_90a kernel built,
  // unless PLUMB_GPU_PATH=portable (read at start; default auto), under which faithful FP8
  // linears take the bf16 matrix-core GEMM on the dequantized weights, what a GPU without FP8
  // (MI250, Ampere) runs: the Hopper path and the portable one measured on the same device.
  bool fp8_tensor_cores() const;
  static constexpr int64_t kGroupedMoeMaxSlots = k::kGroupedMoeMaxSlots;
  // Reduction order. "fast" (default): each kernel sums in the order that suits it, so results
  // differ from the CPU backend's by f32 rounding (a few ulps per op). "cpu": linear, rms_norm,
  // the mHC mixes, the router gate sum and the sparse attention's P.V in the CPU backend's order
  // (kernels/cpu_order.h), which makes every op's result bitwise the CPU's, and so whole forwards
  // in any numerics profile (plumb verify); much slower. The environment sets it at start:
  // PLUMB_GPU_ORDER=cpu|fast, or a comma list of the sites that sum in the CPU's order (linear,
  // norm, hc, gate, mla, attn), the others fast: an experiment tool for finding which
  // reduction's order a result depends on.
  enum OrderSite : unsigned { kLinear = 1, kNorm = 2, kHc = 4, kGate = 8, kMla = 16, kAttn = 32, kAllSites = 63 };
  void set_cpu_order(bool on) { cpu_order_sites_ = on ? unsigned{kAllSites} : 0u; }
  void set_cpu_order_sites(unsigned sites) { cpu_order_sites_ = sites & kAllSites; }
  bool cpu_order() const { return cpu_order_sites_ == kAllSites; }
  bool cpu_order(OrderSite site) const { return (cpu_order_sites_ & site) != 0; }
  // PLUMB_GPU_ORDER's value as OrderSite bits; throws naming the value otherwise.
  static unsigned parse_order(const std::string& order);
  void synchronize() override { sync(); }
  void profile_capture(bool on) override;

  Tensor full(ElemType type, Shape shape, float value) override;
  Tensor from_host(const float* data, Shape shape) override;
  Tensor from_host(const int32_t* data, Shape shape) override;
  void to_host(const Tensor& t, float* out) override;
  void to_host(const Tensor& t, int32_t* out) override;
  void copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override;
  void paged_write(PagedCache& cache, const BlockTables& tables, const Tensor& src, std::span<const CacheRun> runs) override;
  void copy_row_runs(Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n) override;

  Tensor embed(const WeightView& table, const Tensor& ids, std::span<const int32_t> host_ids = {}) override;
  Tensor repeat_rows(const Tensor& x, int64_t copies) override;
  Tensor rms_norm(const Tensor& x, const WeightView* weight, float eps, NormMath math, Round out) override;
  Tensor scale(const Tensor& x, float s, Round out) override;
  Tensor add(const Tensor& a, const Tensor& b, Round out) override;
  Tensor columns(const Tensor& x, int64_t begin, int64_t count) override;
  Tensor linear(const Tensor& x, const WeightView& w, const LinearOpts& opts) override;
  std::pair<Tensor, Tensor> linear_pair(const Tensor& x, const WeightView& a, const WeightView& b,
                                        const LinearOpts& opts) override;
  // A GEMV linear_on set up but did not launch (linear_pair's), with the quantized x it reads.
  struct PendingGemv {
    k::GemvJob job;
    Tensor quantized;
    bool deferred = false;
  };
  // linear() on a given path (Auto: chosen by size and format, as linear() does for linear_path_);
  // with `pending`, a GEMV is left to the caller (its output is returned, not yet written).
  Tensor linear_on(const Tensor& x, const WeightView& w, const LinearOpts& opts, LinearPath path,
                   PendingGemv* pending = nullptr);
  Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) override;
  Tensor quant_fp8(const Tensor& x, int64_t cols, int64_t block) override;
  Tensor norm_rope(const Tensor& x, const WeightView* weight, float eps, NormMath math, const Tensor& positions,
                   const Tensor& inv_freq, Round out, int64_t quant_cols, int64_t quant_block) override;
  Tensor quant_fp4(const Tensor& x, int64_t block) override;
  Tensor hadamard(const Tensor& x, Round out) override;

  HcPreResult hc_pre(const Tensor& X, const HcParams& p, Round out) override;
  Tensor hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb, Round r) override;
  HcPreResult hc_pre_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps, NormMath math,
                          Round out) override;
  Tensor hc_head(const Tensor& X, const HcParams& p, Round out) override;
  Tensor hc_head_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps, NormMath math,
                      Round out) override;

  Tensor compress(const Tensor& kv, const Tensor& score, const Batch& b, std::span<CompressorState> states,
                  const CompressorParams& p, Round out) override;
  Tensor indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                      const BlockTables& tables, const IndexerParams& p) override;
  Tensor sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                          const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                          const AttentionParams& p) override;
  void window_update(std::span<Tensor> rings, const Tensor& kv, const Batch& b) override;
  Tensor mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                       const PagedCache& k_pe, const BlockTables& tables, const MlaParams& p) override;

  Routing route(const Tensor& x, const Tensor& ids, const RouteParams& p) override;
  Tensor moe(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts, const SwiGluWeights& shared,
             const MoeParams& p) override;

 private:
  // Up to this many x rows linear() takes the GEMV for the GEMM paths (gpu_linear.cpp says why).
  static constexpr int64_t kGemvLoopMaxRows = 64;
  // The device table of a routed expert set's weights (w1, w3, w2 per expert), made on first use.
  struct ExpertTable {
    std::vector<uintptr_t> key;  // every view's data, scale, format and size (gpu_moe.cpp)
    Tensor table;
    int64_t experts = 0, width = 0;
    WFormat format = WFormat::F32;
    bool uniform = true;  // one width and one format for all experts
    bool aligned = true;  // every weight's bytes and scales 16-byte aligned (moe_mma.cu copies them so)
  };
  const ExpertTable& expert_table(std::span<const SwiGluWeights> experts, int64_t D);
  // The table when the grouped kernels take this call (few slots, fast order, one format), else null.
  const ExpertTable* grouped_table(int64_t N, int64_t K, int64_t D, std::span<const SwiGluWeights> experts);
  // sh: the shared expert's output, from a side chain that `side` joins before the combine reads it.
  Tensor moe_grouped(const Tensor& x, const Routing& r, const ExpertTable& t, const backend::MoeDims& d,
                     const Tensor& sh, backend::SideChain& side, const MoeParams& p);
  // x's rows [rows, cols] (row stride ldx) rounded to bf16 once for path (c)'s tiles (k::bf16_rows,
  // row stride cols), where they take it (the caller asks k::mma_takes_bf16_x); parts 3: their
  // three exact bf16 parts for path (g) (k::bf16_parts_rows, row stride 3 cols). *out: its address.
  Tensor bf16_copy(const float* x, int64_t ldx, int64_t rows, int64_t cols, const uint16_t** out, int parts = 1);
  // The per-expert path's routed sum into acc [N, D] (zeroed), with the experts whose GEMMs all
  // take the bf16 GEMM grouped into one launch per projection (gpu_moe.cpp). false (nothing done)
  // when none does.
  struct SlotGroups;
  bool moe_prefill(const float* xp, const SlotGroups& sg, std::span<const SwiGluWeights> experts,
                   const backend::MoeDims& d, const MoeParams& p, Tensor& acc);

  struct OwnedWeight {
    WeightRef ref;
    uint64_t fingerprint = 0;  // of the view's bytes, format and shape (see weight())
    void* data = nullptr;
    void* scale = nullptr;
  };
  DeviceInfo info_;
  gpuStream_t stream_ = nullptr;
  bool sync_each_op_ = false;
  bool poison_ = false;
  LinearPath linear_path_ = LinearPath::Auto;
  StagingRing staging_;
  Tensor attn_err_;                // sparse_attention's deferred error report (k::AttnError)
  bool attn_err_pending_ = false;  // an attention call since the last check
  k::AttnError* attention_error_flag();
  void check_attention_errors();
  MoePath moe_path_ = MoePath::Auto;
  bool split_attention_ = true;  // PLUMB_GPU_ATTN=one-kernel: sparse attention never splits (A/B)
  int pv_heads_ = 0;             // PLUMB_GPU_PV_HEADS (A/B): SparseAttnArgs::pv_heads
  int scores_span_ = 0;          // PLUMB_GPU_SCORES_SPAN (A/B): SparseAttnArgs::scores_span
  int64_t pv_mma_rows_ = kPvMmaRowsFrom;
  int64_t pv_mma_calls_ = 0;
  bool scores_mma_ = true;
  int64_t scores_mma_calls_ = 0;
  int64_t entry_reuse_ = kEntryReuse;  // PLUMB_GPU_ATTN_ENTRIES
  bool selected_entries_ = true;       // PLUMB_GPU_ATTN_ENTRIES=chunks / pool: off
  int64_t decoded_entry_calls_ = 0;
  int64_t selected_entry_calls_ = 0;
  bool norm_act_fp8_ = true;     // PLUMB_GPU_ACT_QUANT=fused / separate: off
  bool linear_pairs_ = true;     // PLUMB_GPU_LINEAR_PAIRS=off: off
  int64_t linear_pair_launches_ = 0;
  bool norm_rope_ = true;        // PLUMB_GPU_NORM_ROPE=off: off
  int64_t norm_rope_launches_ = 0;
  bool hc_norm_ = false;  // PLUMB_GPU_HC_NORM=on
  int64_t hc_norm_launches_ = 0;
  int64_t act_fp8_copy_reads_ = 0;
  Lanes lanes_ = Lanes::On;
  enum class Side { Idle, Inline, InlineDone, Running, Done };  // where a side chain stands
  Side side_ = Side::Idle;
  gpuStream_t main_stream_ = nullptr;  // stream_ while a side chain runs on side_stream_
  gpuStream_t side_stream_ = nullptr;  // made at the first side chain, with its two events
  gpuEvent_t fork_event_ = nullptr, side_done_event_ = nullptr;
  int64_t side_chains_ = 0;
  // The act_fp8 copy a norm of `rows` rows of D values writes beside its output (set_norm_act_fp8:
  // a decode step's few rows, at k::rms_norm_act_fp8_ok's widths), or an empty tensor.
  Tensor norm_copy_buffer(int64_t rows, int64_t D, const WeightRef* weight, bool bf16_steps);
  // hc_pre_norm's and hc_head_norm's one pass (k::hc_mix_norm; post and comb null for the head),
  // its y with the act_fp8 copy attached, where it applies (hc_norm_ on, the fast order, a shape
  // its kernel takes; else the caller runs the two ops). w: the norm weight's device copy (null
  // for none), looked up once by the caller (weight() fingerprints the view's bytes).
  bool hc_mix_norm_applies(const HcDims& d, const WeightRef* w, NormMath math);
  Tensor hc_mix_norm(const Tensor& X, const HcDims& d, const HcParams& p, const WeightView* weight, const WeightRef* w,
                     float eps, NormMath math, Round out, float* post, float* comb, const char* op);
  // x's act_fp8 copy (GpuStorage::act_fp8) for a consumer whose 128-blocks are those of x's rows
  // of `row` values, or null (also counts the read).
  const float* act_fp8_copy(const Tensor& x, int64_t row);
  bool fused_act_quant_ = true;  // PLUMB_GPU_ACT_QUANT=separate: act_fp8 by its own launch (A/B)
  MoeMma moe_mma_ = MoeMma::Auto;  // PLUMB_GPU_MOE_MMA
  int moe_mma_tiles_ = kMoeMmaTiles, moe_mma_depth_ = kMoeMmaDepth;  // PLUMB_GPU_MOE_TILES, _DEPTH
  bool fp8_large_tiles_ = true;    // PLUMB_GPU_FP8_TILES
  bool gemm_pipe_ = true;          // PLUMB_GPU_GEMM_PIPE
  int64_t gemm_pipe_calls_ = 0;
  int64_t x_parts_calls_ = 0;
  int64_t f32_mma_calls_ = 0;
  bool f32_mma_passes_ = true;  // PLUMB_GPU_F32_MMA_PASSES
  int64_t moe_mma_calls_ = 0;
  bool fp8_tensor_cores_ = true;  // PLUMB_GPU_PATH
  // FP8 act_fp8 linears on the FP8 tensor cores from this many x rows (gpu_linear.cpp): at 2 the
  // GEMV was faster (H100: B = 2 step -0.10 ms with the tensor cores off, B = 4 +0.16; PERF.md
  // v42). PLUMB_GPU_FP8_MIN_ROWS (A/B).
  int64_t fp8_min_rows_ = 3;
  // Path (f) in Auto from this many blocks after split K: 16 gives it the compressor and the
  // router gate too (H100: B = 64 step -1.02 ms, B = 32 -0.55, B = 16 -0.22, B = 1 and 8 even;
  // PERF.md v20). PLUMB_GPU_F32_MMA_MIN_BLOCKS=0 (the multiprocessors: the head only) is the A/B.
  int64_t f32_mma_min_blocks_ = 16;
  // Path (f) in Auto from this many x rows: at 2 the GEMV was faster (H100, v41's path (f): B = 2
  // step 2.094 -> 1.783 ms, the head 0.582 -> 0.365; B = 4 the GEMV still -0.10 ms, B = 8 +0.30;
  // PERF.md v42). PLUMB_GPU_F32_MMA_MIN_ROWS (A/B).
  int64_t f32_mma_min_rows_ = 3;
  // Path (f) in Auto for FP8 weights (ue8m0 scales) and bf16-rounded outputs too (wo_a from 2
  // rows: H100, B = 32 step -0.49 ms, B = 8 -0.11, B = 1 even; PERF.md v19). PLUMB_GPU_F32_MMA_FP8=off: the A/B.
  bool f32_mma_fp8_ = true;
  // Path (g) in Auto where path (b) (SIMT) would take an f32 linear of a bf16-exact weight: the
  // prefill's compressor and router gate (simt_kernel<1>, 10.6 ms of a 4,096-token prefill on the
  // H100, PERF.md v28). PLUMB_GPU_X_PARTS=off: the A/B.
  bool x_parts_ = true;
  std::deque<ExpertTable> expert_tables_;  // one per routed expert set (a layer), references stay valid
  unsigned cpu_order_sites_ = 0;  // OrderSite bits
  std::shared_ptr<DeviceAllocator> alloc_;
  std::unordered_map<const std::byte*, OwnedWeight> weights_;
  // linear() path Mma: whether the matrix-core kernel (k::linear_mma) may run, else the SIMT bf16
  // kernel (k::linear_mma_simt). Always true on CUDA. On HIP the first call runs a self-check of the
  // MFMA kernel against the SIMT one (gpu_mfma_check.cpp); a mismatch warns once on stderr and
  // selects SIMT for good. State: 0 not checked yet, 1 MFMA verified, -1 SIMT fallback.
  bool mma_matrix_ok();
  int mma_matrix_state_ = 0;
};

// Checked access to a tensor's device memory; a plumb::Error naming `what` if t is undefined, not
// a GPU tensor, or of another element type.
float* dev_f32(const Tensor& t, const char* what = "tensor");
int32_t* dev_i32(const Tensor& t, const char* what = "tensor");
// The raw device address of any GPU tensor (for pointer tables).
void* dev_ptr(const Tensor& t, const char* what = "tensor");
// A paged cache as its kernels read it (kernels/paged.h); `used` false: no entry is read (the
// pool may be empty), a null pool.
k::PagedRef paged_ref(const PagedCache& c, bool used, const char* what);
// Empty when device 0 can be used; otherwise why not (the runtime's message).
std::string device_unavailable_reason();
// gpu call check: a plumb::Error naming the call and the runtime's message.
void check(gpuError_t e, const char* what);


}  // namespace plumb::gpu
