#pragma once
// The layouts' collectives on backend tensors (dist/parallel.h). They move the data through the
// host (Backend::to_host / from_host), which is free on the CPU backend; the GPU backends'
// device collectives are nccl_communicator.h's.
#include <cstdint>

#include "plumb/backend/backend.h"
#include "plumb/dist/communicator.h"
#include "plumb/dist/parallel.h"

namespace plumb::dist {

// local [N, c] (any shape with N rows of c values) on every rank of `group` -> [N, c * size]:
// rank r's values at columns [r * c, (r + 1) * c) of every row (a column-parallel output made whole).
backend::Tensor all_gather_columns(backend::Backend& be, Communicator& group, const backend::Tensor& local);

// Expert parallelism: every rank of the model group holds the terms of its experts' (token,
// slot) pairs (Backend::moe_terms, [M_rank, D] in (token, slot) order); returns every slot's
// term, [N * K, D] in (token, slot) order (Backend::moe_combine's input), on every rank.
// `experts` is the routing's [N, K] expert ids (the same on every rank), E the routed experts.
backend::Tensor all_gather_expert_terms(backend::Backend& be, Parallel& par, const backend::Tensor& experts,
                                        const backend::Tensor& local_terms, int64_t E);

// The tokens rank r of a group of P sums in the home-rank exchange: [N r / P, N (r + 1) / P).
Range home_tokens(int64_t N, int rank, int P);

// Expert parallelism, the home-rank exchange (exchange_terms_home, then all_gather_home_rows of the sums): each
// (token, slot) term goes only to its token's home rank (an all-to-all), which sums its tokens;
// returns this rank's home tokens' terms, [n_home * K, D] in (token, slot) order.
backend::Tensor exchange_terms_home(backend::Backend& be, Parallel& par, const backend::Tensor& experts,
                                    const backend::Tensor& local_terms, int64_t E);

// The home ranks' outputs made whole: rank r holds the rows home_tokens(N, r, P) of an [N, c]
// result; returns all N rows on every rank of `group`.
backend::Tensor all_gather_home_rows(backend::Backend& be, Communicator& group, const backend::Tensor& local,
                                     int64_t N, int64_t c);

}  // namespace plumb::dist
