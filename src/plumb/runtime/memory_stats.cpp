#include "plumb/runtime/memory_stats.h"

#include <fmt/format.h>

#include "plumb/runtime/engine_model.h"
#include "plumb/runtime/kv_layout.h"
#include "plumb/util/host_facts.h"
#include "plumb/util/progress.h"

namespace plumb::runtime {

MemoryStats memory_stats(const EngineModel& model, const KvLayout& layout, std::int64_t blocks, std::int64_t max_seqs) {
  const backend::DeviceMemory d = model.device_memory();
  MemoryStats m;
  m.device = d.device;
  m.weights = d.weights >= 0 ? d.weights : model.weight_bytes();
  m.kv_pool = blocks * layout.bytes_per_block;
  m.sequence_state = max_seqs * layout.state_bytes_per_seq;
  m.workspace = d.workspace;
  m.device_total = d.total;
  m.device_free = d.free;
  m.host_rss = resident_set_bytes();
  return m;
}

std::string device_memory_rows(const MemoryStats& m) {
  const auto b = [](std::int64_t n) { return n < 0 ? std::string("?") : format_bytes(static_cast<double>(n)); };
  const bool host = m.device.empty() || m.device == "host";
  std::string t = fmt::format("memory: device             {:>12}  free of {} ({})\n", b(m.device_free), b(m.device_total),
                              m.device.empty() ? "not reported" : m.device);
  if (host)
    t += "memory: weights stay in the mapped checkpoint (page cache); tensors are host allocations, not counted\n";
  else
    t += fmt::format("memory: device weights     {:>12}  uploaded so far (each weight goes up on its first use)\n"
                     "memory: device workspace   {:>12}  tensors live and cached by the allocator\n",
                     b(m.weights), b(m.workspace));
  t += fmt::format("memory: host resident      {:>12}  this process\n", b(m.host_rss));
  return t;
}

}  // namespace plumb::runtime
