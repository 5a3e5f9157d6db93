#include "plumb/dist/tensor_collectives.h"

#include <algorithm>
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

namespace {

// The routing's expert ids on the host, each checked to be one of the E experts.
std::vector<int32_t> routed_experts(backend::Backend& be, const Tensor& experts, int64_t E) {
  std::vector<int32_t> ids(static_cast<std::size_t>(experts.numel()));
  be.to_host(experts, ids.data());
  for (int32_t e : ids)
    if (e < 0 || e >= E) fail("expert parallelism: routed expert {} is not one of the {} experts", e, E);
  return ids;
}

}  // namespace

Tensor all_gather_expert_terms(backend::Backend& be, Parallel& par, const Tensor& experts, const Tensor& local_terms,
                               int64_t E) {
  Communicator& group = par.model_group();
  const int64_t S = experts.numel(), D = local_terms.dim(1), P = group.size();
  const std::vector<int32_t> ids = routed_experts(be, experts, E);
  std::vector<int64_t> counts(static_cast<std::size_t>(P), 0);  // each rank's slots, in values
  for (int32_t e : ids) counts[static_cast<std::size_t>(par.expert_owner(e, E))] += D;
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

Range home_tokens(int64_t N, int rank, int P) { return {N * rank / P, N * (rank + 1) / P}; }

Tensor exchange_terms_home(backend::Backend& be, Parallel& par, const Tensor& experts, const Tensor& local_terms,
                           int64_t E) {
  Communicator& group = par.model_group();
  const int64_t S = experts.numel(), N = experts.rows(), K = S / std::max<int64_t>(1, N), D = local_terms.dim(1);
  const int P = group.size(), me = group.rank();
  const std::vector<int32_t> ids = routed_experts(be, experts, E);
  std::vector<int> home(static_cast<std::size_t>(N));
  for (int r = 0; r < P; ++r) {
    const Range h = home_tokens(N, r, P);
    for (int64_t t = h.begin; t < h.end; ++t) home[static_cast<std::size_t>(t)] = r;
  }
  // This rank's slots go out in (token, slot) order, which is home-rank order too (homes are
  // contiguous token blocks); a home receives each owner's part in (token, slot) order.
  std::vector<int64_t> send(static_cast<std::size_t>(P), 0), recv(static_cast<std::size_t>(P), 0);
  int64_t mine_rows = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int owner = par.expert_owner(ids[static_cast<std::size_t>(s)], E), h = home[static_cast<std::size_t>(s / K)];
    if (owner == me) {
      send[static_cast<std::size_t>(h)] += D * static_cast<int64_t>(sizeof(float));
      ++mine_rows;
    }
    if (h == me) recv[static_cast<std::size_t>(owner)] += D * static_cast<int64_t>(sizeof(float));
  }
  if (local_terms.rows() != mine_rows)
    fail("expert parallelism: this rank computed {} terms, the routing gives it {}", local_terms.rows(), mine_rows);
  std::vector<float> mine(static_cast<std::size_t>(local_terms.numel()));
  be.to_host(local_terms, mine.data());
  int64_t recv_total = 0;
  for (int64_t b : recv) recv_total += b / static_cast<int64_t>(sizeof(float));
  std::vector<float> got(static_cast<std::size_t>(recv_total));
  group.all_to_all_bytes(mine.data(), send, got.data(), recv);
  // Owner o's block starts after the blocks of the owners below it and lists its slots in order.
  std::vector<int64_t> next(static_cast<std::size_t>(P), 0);
  for (std::size_t r = 1; r < next.size(); ++r) next[r] = next[r - 1] + recv[r - 1] / static_cast<int64_t>(sizeof(float));
  const Range h = home_tokens(N, me, P);
  std::vector<float> out(static_cast<std::size_t>(h.size() * K * D));
  for (int64_t s = h.begin * K; s < h.end * K; ++s) {
    int64_t& at = next[static_cast<std::size_t>(par.expert_owner(ids[static_cast<std::size_t>(s)], E))];
    std::memcpy(&out[static_cast<std::size_t>((s - h.begin * K) * D)], &got[static_cast<std::size_t>(at)],
                static_cast<std::size_t>(D) * sizeof(float));
    at += D;
  }
  return be.from_host(out.data(), {h.size() * K, D});
}

Tensor all_gather_home_rows(backend::Backend& be, Communicator& group, const Tensor& local, int64_t N, int64_t c) {
  const int P = group.size();
  std::vector<int64_t> counts;
  for (int r = 0; r < P; ++r) counts.push_back(home_tokens(N, r, P).size() * c);
  const int64_t n = counts[static_cast<std::size_t>(group.rank())];
  if (local.numel() != n) fail("expert parallelism: a home rank's output has {} values, expected {}", local.numel(), n);
  std::vector<float> mine(static_cast<std::size_t>(n));
  if (n > 0) be.to_host(local, mine.data());
  const std::vector<float> all = group.all_gather(std::span<const float>(mine), std::span<const int64_t>(counts));
  return be.from_host(all.data(), {N, c});
}

}  // namespace plumb::dist
