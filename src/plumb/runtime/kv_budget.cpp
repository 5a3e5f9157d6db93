#include "plumb/runtime/kv_budget.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::runtime {

namespace {
constexpr std::int64_t kMib = std::int64_t{1} << 20;
std::string bytes(std::int64_t n) { return format_bytes(static_cast<double>(n)); }
}  // namespace

std::int64_t workspace_reserve_bytes(std::int64_t max_batch_tokens) {
  return (std::int64_t{2} << 30) + std::max<std::int64_t>(max_batch_tokens, 0) * kMib;
}

KvBudget kv_budget(const backend::DeviceMemory& d, std::int64_t weight_bytes, double fraction,
                   std::int64_t max_batch_tokens) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    fail("--gpu-memory-fraction must be in (0, 1], got {}", fraction);
  if (d.device.empty() || d.device == "host" || d.free < 0)
    return {kHostCacheMib, fmt::format("--kv-cache-mb {} (the default on the host)", kHostCacheMib)};
  const std::int64_t pending = std::max<std::int64_t>(weight_bytes - std::max<std::int64_t>(d.weights, 0), 0);
  const std::int64_t reserve = workspace_reserve_bytes(max_batch_tokens);
  const std::int64_t usable = static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(d.free)));
  const std::int64_t left = usable - pending - reserve;
  if (left < kMib)
    fail("the KV cache does not fit on {}: {} of its {} free ({} x --gpu-memory-fraction) minus {} of weights still "
         "to upload and a {} workspace reserve leaves nothing; free the device, raise --gpu-memory-fraction, lower "
         "--max-batch-tokens, or give --kv-cache-mb",
         d.device, bytes(usable), bytes(d.free), fraction, bytes(pending), bytes(reserve));
  return {left / kMib, fmt::format("{} x {} free on {}, minus {} of weights to upload and a {} workspace reserve "
                                   "(--gpu-memory-fraction; --kv-cache-mb sets it instead)",
                                   fraction, bytes(d.free), d.device, bytes(pending), bytes(reserve))};
}

}  // namespace plumb::runtime
