#pragma once
// The CPU backend: a plain, readable f32 implementation of every op in backend.h, and the
// reference the GPU backends are tested against. Ops are spread over files by topic
// (cpu_backend.cpp: memory and elementwise; cpu_linear.cpp; cpu_hc.cpp; cpu_compress.cpp;
// cpu_attention.cpp; cpu_mla.cpp; cpu_moe.cpp).
#include "plumb/backend/backend.h"
#include "plumb/backend/op_checks.h"
#include "plumb/util/thread_pool.h"

namespace plumb::cpu {

using namespace plumb::backend;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}
  std::string name() const override { return "cpu"; }
  ThreadPool& pool() { return pool_; }

  Tensor full(ElemType type, Shape shape, float value) override;
  Tensor from_host(const float* data, Shape shape) override;
  Tensor from_host(const int32_t* data, Shape shape) override;
  void to_host(const Tensor& t, float* out) override;
  void to_host(const Tensor& t, int32_t* out) override;
  void copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override;
  void paged_write(PagedCache& cache, const BlockTables& tables, const Tensor& src, std::span<const CacheRun> runs) override;

  Tensor embed(const WeightView& table, const Tensor& ids) override;
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

 private:
  ThreadPool pool_;
};

// Rounds n values in place when r == Round::BF16.
void apply_round(float* x, int64_t n, Round r);

}  // namespace plumb::cpu
