#pragma once
// The forwards' parallel forms of an op (dist/parallel.h), shared by V4 and V3: with no layout
// (or a one-rank group) each is the plain op.
#include <span>

#include "plumb/backend/backend.h"
#include "plumb/dist/parallel.h"

namespace plumb {

// Backend::moe with the routed experts split across the model group: this rank's experts'
// terms (moe_terms), all-gathered, summed on every rank in moe()'s order (moe_combine), so the
// result is bitwise moe()'s. `experts` may hold empty views outside this rank's range.
backend::Tensor parallel_moe(backend::Backend& be, dist::Parallel* par, const backend::Tensor& x,
                             const backend::Routing& r, std::span<const backend::SwiGluWeights> experts,
                             const backend::SwiGluWeights& shared, const backend::MoeParams& p);

// A column-parallel output made whole across the tp group (dist::all_gather_columns).
backend::Tensor gather_heads(backend::Backend& be, dist::Parallel* par, const backend::Tensor& local);

// True when the layout splits the attention heads.
inline bool splits_heads(const dist::Parallel* par) { return par && par->tp_size() > 1; }

}  // namespace plumb
