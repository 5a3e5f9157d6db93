#pragma once
// --dp / --tp / --ep: the multi-process layout of a command launched by mpirun or srun
// (dist/parallel.h, docs/DISTRIBUTED.md). Their product must be the number of processes.
#include <CLI/CLI.hpp>

#include <memory>

#include "plumb/dist/parallel.h"

namespace plumb::cli {

struct ParallelFlags {
  int dp = 1, tp = 1, ep = 1;
};

void add_parallel_flags(CLI::App& cmd, ParallelFlags& f);

// Joins the launch's world and splits it by the flags; null for one process with no layout. A
// plumb::Error when the product is not the number of processes, or several were launched
// without a layout.
std::shared_ptr<dist::Parallel> join_layout(const ParallelFlags& f);

// Whether this process writes the command's output (one process, or world rank 0).
inline bool writes_output(const dist::Parallel* par) { return !par || par->writes_output(); }

}  // namespace plumb::cli
