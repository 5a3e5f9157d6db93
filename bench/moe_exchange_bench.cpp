// plumb_moe_exchange_bench: the two ways the expert-parallel MoE can bring every routed term
// where it is summed (issue #18 item 2), timed on the ranks of an mpirun launch at V4-Flash's
// shapes (hidden 4096, top-6 of 256 experts, routing uniform), host buffers as the CPU backend
// has them. Both keep the one-process sum order, so both are bitwise (dist/parallel.h):
//   gather  every rank all-gathers every (token, slot) term and sums every token itself: one
//           collective; each rank receives T * k * D * (M - 1) / M floats.
//   home    token t is summed on its home rank (contiguous blocks of T / M tokens): an
//           all-to-all sends each term to its token's home, then the homes' outputs are
//           all-gathered: two collectives; each rank receives about T * (k / M + 1) * D * (M - 1) / M.
// Prints a Markdown table of median microseconds per exchange on rank 0.
//   mpirun -np 2 build/bench/plumb_moe_exchange_bench [--tokens 1,8,64,512,2048] [--reps 30]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "plumb/dist/communicator.h"
#include "plumb/dist/tensor_collectives.h"
#include "plumb/dist/world.h"
#include "plumb/util/error.h"

using namespace plumb;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kHidden = 4096, kTopK = 6, kExperts = 256;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  for (std::size_t i = 0; i <= s.size();) {
    const std::size_t j = std::min(s.find(',', i), s.size());
    out.push_back(std::stoll(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

struct Shape {
  int M = 1, rank = 0;
  int64_t T = 0;
  std::vector<int> owner;  // [T * k]: the rank owning each slot's expert (the same on every rank)
  dist::Range home(int r) const { return dist::home_tokens(T, r, M); }  // the model's split
  int home_of(int64_t t) const {
    int r = 0;
    while (!home(r).contains(t)) ++r;
    return r;
  }
};

double median_us(dist::Communicator& c, int reps, const auto& exchange) {
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    c.barrier();
    const auto t0 = Clock::now();
    exchange();
    const double dt = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 3) us.push_back(dt);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double time_gather(dist::Communicator& c, const Shape& s, int reps) {
  std::vector<int64_t> bytes(static_cast<std::size_t>(s.M), 0);
  for (int o : s.owner) bytes[static_cast<std::size_t>(o)] += kHidden * 4;
  std::vector<float> mine(static_cast<std::size_t>(bytes[static_cast<std::size_t>(s.rank)] / 4), 1.f);
  std::vector<float> all(static_cast<std::size_t>(s.T * kTopK * kHidden));
  return median_us(c, reps, [&] { c.all_gather_bytes(mine.data(), bytes, all.data()); });
}

double time_home(dist::Communicator& c, const Shape& s, int reps) {
  const auto M = static_cast<std::size_t>(s.M);
  std::vector<int64_t> send(M, 0), recv(M, 0), outs(M, 0);
  for (int64_t i = 0; i < s.T * kTopK; ++i) {
    const int o = s.owner[static_cast<std::size_t>(i)], h = s.home_of(i / kTopK);
    if (o == s.rank) send[static_cast<std::size_t>(h)] += kHidden * 4;
    if (h == s.rank) recv[static_cast<std::size_t>(o)] += kHidden * 4;
  }
  for (int r = 0; r < s.M; ++r) outs[static_cast<std::size_t>(r)] = s.home(r).size() * kHidden * 4;
  auto total = [](const std::vector<int64_t>& v) {
    int64_t t = 0;
    for (int64_t b : v) t += b;
    return static_cast<std::size_t>(t / 4);
  };
  std::vector<float> sbuf(total(send), 1.f), rbuf(total(recv)), all(total(outs));
  std::vector<float> mine(static_cast<std::size_t>(outs[static_cast<std::size_t>(s.rank)] / 4), 1.f);
  return median_us(c, reps, [&] {
    c.all_to_all_bytes(sbuf.data(), send, rbuf.data(), recv);
    c.all_gather_bytes(mine.data(), outs, all.data());
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_moe_exchange_bench: the expert-parallel term exchange, gather vs home-rank sum"};
  std::string tokens = "1,8,64,256,1024,4096";
  int reps = 30;
  app.add_option("--tokens", tokens, "tokens per step, comma separated")->capture_default_str();
  app.add_option("--reps", reps, "timed exchanges per size (the median is printed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    const auto world = dist::world();
    if (world->size() < 2) fail("run it as several processes: mpirun -np 2 {}", argv[0]);
    Shape s;
    s.M = world->size();
    s.rank = world->rank();
    if (s.rank == 0)
      std::printf("| tokens | gather us | home us | gather MB in / rank | home MB in / rank |\n|---|---|---|---|---|\n");
    for (const int64_t T : parse_list(tokens)) {
      s.T = T;
      std::mt19937 rng(static_cast<unsigned>(T));  // the same routing on every rank
      std::uniform_int_distribution<int64_t> expert(0, kExperts - 1);
      s.owner.clear();
      for (int64_t i = 0; i < T * kTopK; ++i) s.owner.push_back(static_cast<int>(expert(rng) / (kExperts / s.M)));
      const double g = time_gather(*world, s, reps), h = time_home(*world, s, reps);
      const double frac = static_cast<double>(s.M - 1) / s.M, mb = static_cast<double>(T * kHidden * 4) / 1e6;
      if (s.rank == 0)
        std::printf("| %ld | %.1f | %.1f | %.2f | %.2f |\n", static_cast<long>(T), g, h, mb * kTopK * frac,
                    mb * (static_cast<double>(kTopK) / s.M + 1) * frac);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb_moe_exchange_bench: %s\n", e.what());
    dist::abort_if_parallel(1);
    return 1;
  }
}
