#pragma once
// Where an engine's memory goes, by kind: the rows the start-up memory table adds to the KV
// accounting (kv_layout.h) and the plumb_memory_bytes gauges of /metrics. The engine thread
// refreshes them (EngineStats::memory); -1 is "not known for this backend".
#include <cstdint>
#include <string>

namespace plumb::runtime {

class EngineModel;
struct KvLayout;

struct MemoryStats {
  std::string device;                 // "host", "cuda:0 NVIDIA H200", ...
  std::int64_t weights = -1;          // on the device (GPU: uploaded so far); CPU: the mapped checkpoint's bytes
  std::int64_t kv_pool = -1;          // the KV block pool
  std::int64_t sequence_state = -1;   // every sequence slot's fixed state (window rings, compressor states)
  std::int64_t workspace = -1;        // activations and scratch (GPU: tensors live and cached)
  std::int64_t device_total = -1, device_free = -1;  // the device (the CPU backend: host memory)
  std::int64_t host_rss = -1;         // this process's resident set
};

// Asks the model's backend (on the thread that runs it) and this process; the pool and the
// per-sequence state from the layout: `blocks` blocks and `max_seqs` sequences.
MemoryStats memory_stats(const EngineModel& model, const KvLayout& layout, std::int64_t blocks, std::int64_t max_seqs);

// The table's device rows ("memory: device ...", resident weights, workspace, host RSS).
std::string device_memory_rows(const MemoryStats& m);

}  // namespace plumb::runtime
