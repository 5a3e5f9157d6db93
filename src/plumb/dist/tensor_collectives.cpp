#include "plumb/dist/tensor_collectives.h"

#include <cstring>
#include <vector>

#include "plumb/util/error.h"

namespace plumb::dist {

using backend::Tensor;

Tensor all_gather_columns(backend::Backend& be, Communicator& group, const Tensor& local) {
  const int64_t N = local.rows(), c = local.row_size(), P = group.size();
  if (P == 1) return local.reshaped({N, c});
  std::vector<float> mine(static_cast<std::size_t>(N * c));
  be.to_host(local, mine.data());
  const std::vector<float> all = group.all_gather(std::span<const float>(mine));  // [P, N, c]
  std::vector<float> out(static_cast<std::size_t>(N * c * P));
  for (int64_t r = 0; r < P; ++r)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(&out[(n * P + r) * c], &all[(r * N + n) * c], static_cast<std::size_t>(c) * sizeof(float));
  return be.from_host(out.data(), {N, c * P});
}

Tensor all_gather_expert_terms(backend::Backend& be, Parallel& par, const Tensor& experts, const Tensor& local_terms,
                               int64_t E) {
  Communicator& group = par.model_group();
  const int64_t S = experts.numel(), D = local_terms.dim(1), P = group.size();
  std::vector<int32_t> ids(static_cast<std::size_t>(S));
  be.to_host(experts, ids.data());
  std::vector<int64_t> counts(static_cast<std::size_t>(P), 0);  // each rank's slots, in values
  for (int32_t e : ids) {
    if (e < 0 || e >= E) fail("expert parallelism: routed expert {} is not one of the {} experts", e, E);
    counts[static_cast<std::size_t>(par.expert_owner(e, E))] += D;
  }
  if (local_terms.numel() != counts[static_cast<std::size_t>(group.rank())])
    fail("expert parallelism: this rank computed {} values for its slots, the routing gives it {}",
         local_terms.numel(), counts[static_cast<std::size_t>(group.rank())]);
  std::vector<float> mine(static_cast<std::size_t>(local_terms.numel()));
  be.to_host(local_terms, mine.data());
  const std::vector<float> all = group.all_gather(std::span<const float>(mine), std::span<const int64_t>(counts));
  // Rank r's block starts after the blocks of the ranks below it and lists its slots in order.
  std::vector<int64_t> next(static_cast<std::size_t>(P), 0);
  for (int64_t r = 1; r < P; ++r) next[r] = next[r - 1] + counts[r - 1];
  std::vector<float> out(static_cast<std::size_t>(S * D));
  for (int64_t s = 0; s < S; ++s) {
    int64_t& at = next[static_cast<std::size_t>(par.expert_owner(ids[s], E))];
    std::memcpy(&out[s * D], &all[at], static_cast<std::size_t>(D) * sizeof(float));
    at += D;
  }
  return be.from_host(out.data(), {S, D});
}

}  // namespace plumb::dist
