#pragma once
// Facts about the machine and this process that `plumb doctor` judges and the memory reports
// print: kernel settings under /proc and /sys, resource limits, the environment variables that
// change how the GPU runtimes behave, host memory. Read through HostPaths so a test can point
// the readers at a fake tree; the judging (plumb/doctor) only ever sees the filled struct.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace plumb {

struct ResourceLimit {
  static constexpr std::int64_t kUnlimited = -1;
  std::int64_t soft = kUnlimited, hard = kUnlimited;
};

struct HostFacts {
  std::map<std::string, std::string> env;      // those of doctor_env_names() that are set
  std::optional<std::int64_t> max_map_count;   // vm.max_map_count; empty: not readable
  std::vector<std::string> cpu_governors;      // per CPU exposing cpufreq; empty: none does (VMs)
  std::string thp_enabled, thp_defrag;         // "always [madvise] never" as the kernel says; empty: absent
  std::optional<ResourceLimit> open_files;     // RLIMIT_NOFILE
  std::optional<ResourceLimit> locked_memory;  // RLIMIT_MEMLOCK, bytes
  // The real GPU architectures the amdgpu driver reports (KFD topology gfx_target_version, e.g.
  // 90010 for gfx90a), which HSA_OVERRIDE_GFX_VERSION does not change.
  std::vector<std::int64_t> kfd_gfx_target_versions;
  std::int64_t cpus = 0;                       // online hardware threads
  std::int64_t memory_total = -1, memory_available = -1;  // bytes, /proc/meminfo; -1: unknown
  std::string kernel;                          // uname -sr
};

// Where the readers look; tests pass a temporary tree with the same layout.
struct HostPaths {
  std::string proc = "/proc", sys = "/sys";
};

// The environment variables doctor reports (GPU selection and overrides, plumb's own switches).
const std::vector<std::string>& doctor_env_names();

// Reads everything above. Never throws: what cannot be read stays empty / -1.
HostFacts read_host_facts(const HostPaths& paths = {});

// The mode in brackets of a kernel choice list: "always [madvise] never" -> "madvise"; the whole
// text when it has no brackets.
std::string selected_choice(const std::string& kernel_list);

// Resident set size of this process in bytes (/proc/self/statm); -1 when unreadable.
std::int64_t resident_set_bytes(const HostPaths& paths = {});

// MemTotal and MemAvailable from /proc/meminfo in bytes; -1 each when unreadable.
struct HostMemory {
  std::int64_t total = -1, available = -1;
};
HostMemory read_host_memory(const HostPaths& paths = {});

}  // namespace plumb
