#pragma once
// plumb_bench --ops: per-op timings of one backend over the op cases the GPU harness checks
// (tests/backend/op_cases.h), as llama.cpp's test-backend-ops runs one case list in eval and
// perf modes. Timings only: nothing is asserted.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plumb/backend/backend.h"

namespace plumb::bench {

struct OpBenchOptions {
  std::string filter;   // only cases whose "op params" name contains this
  int64_t warmup = 3;   // untimed calls first (weight uploads, kernel loading)
  int64_t reps = 50;    // timed calls; the median is reported
};

// Times every selected case on `be`: device events on a GPU backend, the host clock after a
// synchronize elsewhere. Prints a Markdown table; returns one JSON record per case.
nlohmann::json run_op_bench(backend::Backend& be, const OpBenchOptions& o);

}  // namespace plumb::bench
