#include "plumb/model/parallel_ops.h"

#include "plumb/dist/tensor_collectives.h"

namespace plumb {

backend::Tensor parallel_moe(backend::Backend& be, dist::Parallel* par, const backend::Tensor& x,
                             const backend::Routing& r, std::span<const backend::SwiGluWeights> experts,
                             const backend::SwiGluWeights& shared, const backend::MoeParams& p) {
  if (!par || par->model_size() == 1 || experts.empty()) return be.moe(x, r, experts, shared, p);
  const auto E = static_cast<int64_t>(experts.size());
  const dist::Range mine = par->experts(E, "expert parallelism");
  const backend::Tensor terms = be.moe_terms(x, r, experts, {mine.begin, mine.end}, p);
  const backend::Tensor all = dist::all_gather_expert_terms(be, *par, r.experts, terms, E);
  return be.moe_combine(x, r, all, shared, p);
}

backend::Tensor gather_heads(backend::Backend& be, dist::Parallel* par, const backend::Tensor& local) {
  if (!splits_heads(par)) return local;
  return dist::all_gather_columns(be, par->tp_group(), local);
}

}  // namespace plumb
