#pragma once
// The CPU backend: a plain, readable f32 implementation of every op in backend.h, and the
// reference the GPU backends are tested against. Ops are spread over files by topic
// (cpu_backend.cpp: memory and elementwise; cpu_linear.cpp; cpu_hc.cpp; cpu_compress.cpp;
// cpu_attention.cpp; cpu_mla.cpp; cpu_moe.cpp).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/backend/cpu/weight_decode.h"
#include "plumb/backend/op_checks.h"
#include "plumb/util/thread_pool.h"

namespace plumb::cpu {

using namespace plumb::backend;

class CpuBackend final : public Backend {
 public:
  // Summation order, an experiment tool (issue 13): by default every op sums in one fixed order
  // (the one the GPU's "cpu" order reproduces). The listed sites can sum in another order
  // instead, so that what a change of f32 order alone does to a forward is measured on the CPU
  // (the noise floor behind the golden tests' thresholds, tools/golden/order_floor.py). Sites:
  // linear (linear() and the experts' GEMMs), gate (the router's), norm (rms_norm), hc (the mHC
  // mixes and their norm), mla (V3 attention scores), attn (V4 attention scores, its
  // softmax and P.V sums within a block, and the indexer scores), pv (the V4 attention's softmax
  // and P.V sums alone: the floor of the GPU's P.V on the matrix unit, whose scores are the CPU's).
  enum OrderSite : unsigned {
    kLinear = 1, kNorm = 2, kHc = 4, kGate = 8, kMla = 16, kAttn = 32, kPv = 64, kAllSites = 127
  };
  struct SumOrders {
    unsigned sites = 0;                  // OrderSite bits summed in `other`
    SumOrder other = SumOrder::Reversed;
    std::string spec;                    // as given, for the audit facts
  };
  // PLUMB_CPU_ORDER's value: "[reversed:|blocked:]site,site,..." or "all" for every site
  // (the order defaults to reversed); "" or "canonical" for none. Throws naming the value otherwise.
  static SumOrders parse_order(const std::string& order);

  explicit CpuBackend(int threads) : pool_(threads) {}
  CpuBackend(int threads, SumOrders orders) : pool_(threads), orders_(std::move(orders)) {}
  std::string name() const override { return "cpu"; }
  std::vector<std::pair<std::string, std::string>> facts() const override;
  ThreadPool& pool() { return pool_; }
  SumOrder order(OrderSite site) const { return (orders_.sites & site) ? orders_.other : SumOrder::Canonical; }

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
  Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) override;
  Tensor quant_fp8(const Tensor& x, int64_t cols, int64_t block) override;
  Tensor quant_fp4(const Tensor& x, int64_t block) override;
  Tensor hadamard(const Tensor& x, Round out) override;

  HcPreResult hc_pre(const Tensor& X, const HcParams& p, Round out) override;
  Tensor hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb, Round r) override;
  Tensor hc_head(const Tensor& X, const HcParams& p, Round out) override;

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
  Tensor moe_terms(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                   std::pair<int64_t, int64_t> owned, const MoeParams& p) override;
  Tensor moe_combine(const Tensor& x, const Routing& r, const Tensor& terms, const SwiGluWeights& shared,
                     const MoeParams& p) override;

 private:
  ThreadPool pool_;
  SumOrders orders_;
};

// A CPU backend whose sites sum in the orders `order` names (CpuBackend::parse_order); the
// backend name "cpu@<order>" (make_backend) and the environment's PLUMB_CPU_ORDER lead here.
std::unique_ptr<Backend> make_cpu_backend_in_order(int threads, const std::string& order);

// Rounds n values in place when r == Round::BF16.
void apply_round(float* x, int64_t n, Round r);

}  // namespace plumb::cpu
