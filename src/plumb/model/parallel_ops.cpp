#include "plumb/model/parallel_ops.h"

#include <algorithm>
#include <vector>

#include "plumb/dist/tensor_collectives.h"

namespace plumb {

namespace {

// From this many tokens on, the routed terms go to their token's home rank (an all-to-all) and
// each home sums its tokens, then the sums are all-gathered; below, every rank all-gathers every
// term and sums every token (one collective). Measured on 2 ranks at V4-Flash's shapes
// (plumb_moe_exchange_bench, docs/DISTRIBUTED.md): equal at 8 tokens, the home sum 1.3-2.9x
// faster from 64 on, the gather 1.2-1.4x faster at one token.
constexpr int64_t kHomeSumTokens = 16;

// Rows [begin, begin + n) of a 2-d f32 or i32 tensor (through the host: the layouts run on the
// CPU backend).
backend::Tensor rows_of(backend::Backend& be, const backend::Tensor& t, int64_t begin, int64_t n) {
  const int64_t c = t.row_size();
  if (t.type() == backend::ElemType::I32) {
    std::vector<int32_t> all(static_cast<std::size_t>(t.numel()));
    be.to_host(t, all.data());
    return be.from_host(all.data() + begin * c, {n, c});
  }
  std::vector<float> all(static_cast<std::size_t>(t.numel()));
  be.to_host(t, all.data());
  return be.from_host(all.data() + begin * c, {n, c});
}

}  // namespace

backend::Tensor parallel_moe(backend::Backend& be, dist::Parallel* par, const backend::Tensor& x,
                             const backend::Routing& r, std::span<const backend::SwiGluWeights> experts,
                             const backend::SwiGluWeights& shared, const backend::MoeParams& p) {
  if (!par || par->model_size() == 1 || experts.empty()) return be.moe(x, r, experts, shared, p);
  const auto E = static_cast<int64_t>(experts.size());
  const dist::Range mine = par->experts(E, "expert parallelism");
  const backend::Tensor terms = be.moe_terms(x, r, experts, {mine.begin, mine.end}, p);
  const int64_t N = x.rows();
  if (N < std::max<int64_t>(kHomeSumTokens, par->model_size())) {
    const backend::Tensor all = dist::all_gather_expert_terms(be, *par, r.experts, terms, E);
    return be.moe_combine(x, r, all, shared, p);
  }
  dist::Communicator& group = par->model_group();
  const backend::Tensor home_terms = dist::exchange_terms_home(be, *par, r.experts, terms, E);
  const dist::Range h = dist::home_tokens(N, group.rank(), group.size());
  const backend::Routing home_r{rows_of(be, r.experts, h.begin, h.size()), rows_of(be, r.weights, h.begin, h.size())};
  const backend::Tensor out = be.moe_combine(rows_of(be, x, h.begin, h.size()), home_r, home_terms, shared, p);
  return dist::all_gather_home_rows(be, group, out, N, out.row_size()).reshaped(x.shape());
}

backend::Tensor gather_heads(backend::Backend& be, dist::Parallel* par, const backend::Tensor& local) {
  if (!splits_heads(par)) return local;
  return dist::all_gather_columns(be, par->tp_group(), local);
}

}  // namespace plumb
