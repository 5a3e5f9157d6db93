#pragma once
// Hardware ceilings measured in the same run as the benchmark (METHOD: a floor is only as good as
// the ceiling it divides by).
#include <vector>

#include "plumb/backend/backend.h"

namespace plumb::bench {

// Median of timings (0 for none): what every benchmark number reports.
double median(std::vector<double> v);

// Device-to-device copy rate in GB/s counting bytes read plus bytes written (1 GiB buffer, median
// of 20 copies after warm-up, timed with device events). Host memcpy for the CPU backend.
double copy_bandwidth_gbs(backend::Backend& be);

}  // namespace plumb::bench
