#pragma once
// A NaN or infinity in logits or converted weights means a broken checkpoint or kernel; passing
// it on gives greedy ids [0, 0, 0] or silently poisoned weight files, so such values are refused.
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

#include "plumb/util/error.h"

namespace plumb {

// Throws plumb::Error "<what>: non-finite value <v> at index <first_index + i>" for the first
// NaN or infinity in `values`.
inline void require_finite(std::span<const float> values, std::string_view what, std::int64_t first_index = 0) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      fail("{}: non-finite value {} at index {}", what, values[i], first_index + static_cast<std::int64_t>(i));
}

}  // namespace plumb
