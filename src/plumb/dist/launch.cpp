#include "plumb/dist/launch.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

struct Source {
  const char* launcher;
  const char *rank, *size, *local;  // variable names
  const char* only_with;            // a variable that must be set too (or null)
};

// In order of precedence.
constexpr Source kSources[] = {
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", nullptr},
};

int number(const GetEnv& env, const char* name, int min) {
  const char* v = env(name);
  int x = 0;
  const char* end = v + std::strlen(v);
  const auto [p, ec] = std::from_chars(v, end, x);
  if (ec != std::errc() || p != end || x < min)
    fail("launch environment: {}='{}' is not an integer >= {}", name, v, min);
  return x;
}

std::optional<LaunchInfo> read_source(const GetEnv& env, const Source& s) {
  if (!env(s.rank) && !env(s.size)) return std::nullopt;
  if (s.only_with && !env(s.only_with)) return std::nullopt;
  if (!env(s.rank) || !env(s.size)) fail("launch environment: {} is set without {}", env(s.rank) ? s.rank : s.size,
                                         env(s.rank) ? s.size : s.rank);
  LaunchInfo li;
  li.launcher = s.launcher;
  li.size = number(env, s.size, 1);
  li.rank = number(env, s.rank, 0);
  if (li.rank >= li.size) fail("launch environment: {}={} is not below {}={}", s.rank, li.rank, s.size, li.size);
  li.local_rank = env(s.local) ? number(env, s.local, 0) : 0;
  return li;
}

}  // namespace

LaunchInfo read_launch(const GetEnv& getenv) {
  const GetEnv env = getenv ? getenv : GetEnv([](const char* n) { return std::getenv(n); });
  std::optional<LaunchInfo> first;
  for (const Source& s : kSources) {
    const std::optional<LaunchInfo> li = read_source(env, s);
    if (!li) continue;
    if (!first) {
      first = li;
    } else if (li->rank != first->rank || li->size != first->size) {
      fail("launch environment: {} says rank {} of {}, {} says rank {} of {}", first->launcher, first->rank,
           first->size, li->launcher, li->rank, li->size);
    }
  }
  LaunchInfo out = first.value_or(LaunchInfo{});
  if (env("MASTER_ADDR")) out.master_addr = env("MASTER_ADDR");
  if (env("MASTER_PORT")) out.master_port = env("MASTER_PORT");
  return out;
}

}  // namespace plumb::dist
