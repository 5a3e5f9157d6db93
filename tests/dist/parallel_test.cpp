// dist::Parallel and the collectives on one process (the multi-process runs are the ctest
// dist_* cases under mpirun): a layout must match the number of processes, with a clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plumb/dist/communicator.h"
#include "plumb/dist/parallel.h"
#include "plumb/dist/tensor_collectives.h"
#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

std::string error_of(Layout l) {
  try {
    Parallel p(make_local_communicator(), l);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Parallel, OneProcessOwnsEverything) {
  Parallel p(make_local_communicator(), {});
  EXPECT_EQ(p.experts(16, "m").begin, 0);
  EXPECT_EQ(p.experts(16, "m").end, 16);
  EXPECT_EQ(p.heads(4, "m").size(), 4);
  EXPECT_EQ(p.expert_owner(15, 16), 0);
  EXPECT_TRUE(p.writes_output());
}

TEST(Parallel, ALayoutMustMatchTheProcesses) {
  EXPECT_NE(error_of({1, 2, 1}).find("--dp 1 x --tp 2 x --ep 1 = 2 processes, but 1 were launched"), std::string::npos);
  EXPECT_NE(error_of({1, 1, 0}).find("every degree must be at least 1"), std::string::npos);
}

TEST(Collectives, LocalGroupIsACopy) {
  const auto c = make_local_communicator();
  const std::vector<float> v = {1.5f, -2.f, 3.25f};
  EXPECT_EQ(c->all_gather(std::span<const float>(v)), v);
  const int64_t wrong[] = {3, 3};
  std::vector<float> out(6);
  EXPECT_THROW(c->all_gather_bytes(v.data(), wrong, out.data()), Error);
  auto be = backend::make_cpu_backend(1);
  const backend::Tensor t = be->from_host(v.data(), {3, 1});
  std::vector<float> back(3);
  be->to_host(all_gather_columns(*be, *c, t), back.data());
  EXPECT_EQ(back, v);
  const int64_t bytes[] = {12};
  std::vector<float> moved(3);
  c->all_to_all_bytes(v.data(), bytes, moved.data(), bytes);
  EXPECT_EQ(moved, v);
  const int64_t other[] = {8};
  EXPECT_THROW(c->all_to_all_bytes(v.data(), bytes, moved.data(), other), Error);
  be->to_host(all_gather_home_rows(*be, *c, t, 3, 1), back.data());  // one rank is every token's home
  EXPECT_EQ(back, v);
}

TEST(Collectives, HomeTokensSplitEveryTokenOnce) {
  for (const int64_t N : {0, 1, 5, 16, 131})
    for (const int P : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < P; ++r) {
        const Range h = home_tokens(N, r, P);
        EXPECT_EQ(h.begin, next) << N << " tokens, rank " << r << " of " << P;
        EXPECT_LE(h.size(), (N + P - 1) / P);
        next = h.end;
      }
      EXPECT_EQ(next, N);
    }
}

}  // namespace
}  // namespace plumb::dist
