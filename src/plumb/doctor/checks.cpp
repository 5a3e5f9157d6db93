#include "plumb/doctor/checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "plumb/util/progress.h"

namespace plumb::doctor {
namespace {

using Findings = std::vector<Finding>;

std::string bytes(std::int64_t n) { return format_bytes(static_cast<double>(n)); }

std::string limit_text(std::int64_t v, bool in_bytes) {
  if (v == ResourceLimit::kUnlimited) return "unlimited";
  return in_bytes ? bytes(v) : std::to_string(v);
}

void add(Findings& out, std::string check, Level level, std::string detail, std::string fix = {}) {
  out.push_back({std::move(check), level, std::move(detail), std::move(fix)});
}

const std::string* env(const Facts& f, const char* name) {
  const auto it = f.host.env.find(name);
  return it == f.host.env.end() ? nullptr : &it->second;
}

// ---- GPU runtime and devices

void check_gpu_runtime(const Facts& f, Findings& out) {
  const backend::GpuFacts& g = f.gpu;
  if (g.platform.empty()) {
    add(out, "gpu_runtime", Level::kNote, "plumb was built without a GPU backend: --backend cpu only");
    return;
  }
  if (g.devices.empty()) {
    add(out, "gpu_runtime", Level::kWarning,
        fmt::format("the {} backend is built in but {}: --backend {} will refuse to start", g.platform,
                    g.error.empty() ? "no device is visible" : g.error, g.platform),
        g.platform == "cuda" ? "check the driver with nvidia-smi, and CUDA_VISIBLE_DEVICES"
                             : "check the driver with rocm-smi (is /dev/kfd there?), and HIP_VISIBLE_DEVICES / "
                               "ROCR_VISIBLE_DEVICES");
    return;
  }
  add(out, "gpu_runtime", Level::kOk,
      fmt::format("{} runtime {}, driver {}, {} device(s)", g.platform, g.runtime_version.empty() ? "?" : g.runtime_version,
                  g.driver_version.empty() ? "?" : g.driver_version, g.devices.size()));
}

void check_gpu_device(const Facts& f, const backend::GpuDeviceFacts& d, Findings& out) {
  const std::string who = fmt::format("GPU {} ({}, {})", d.index, d.name, d.arch);
  const std::string check = fmt::format("gpu{}", d.index);
  if (!d.error.empty())
    add(out, check, Level::kWarning, fmt::format("{}: {}", who, d.error),
        "the device may be in use exclusively or faulted; check nvidia-smi / rocm-smi");
  if (!d.arch.empty() && !targets_cover(f.gpu.platform, f.gpu.targets, d.arch))
    add(out, check + "_targets", Level::kError,
        fmt::format("{}: this build's kernels are for {}, which cannot run on {}", who, f.gpu.targets, d.arch),
        f.gpu.platform == "hip" ? fmt::format("rebuild with -DPLUMB_HIP_ARCH={}", d.arch.substr(0, d.arch.find(':')))
                                : "rebuild with PLUMB_CUDA_ARCHS including this architecture (sm_80 or newer)");
  if (d.memory_total > 0 && d.memory_free >= 0) {
    const std::int64_t used = d.memory_total - d.memory_free;
    if (used > std::max(kForeignDeviceMemory, d.memory_total / 10))
      add(out, check + "_memory", Level::kWarning,
          fmt::format("{}: {} of {} already in use before plumb loads anything", who, bytes(used), bytes(d.memory_total)),
          "another process holds it: see nvidia-smi / rocm-smi --showpids");
  }
  if (d.ecc == 0) add(out, check + "_ecc", Level::kNote, fmt::format("{}: ECC is off", who));
}

// HSA_OVERRIDE_GFX_VERSION makes the HIP runtime treat the GPU as another architecture (it is
// meant for consumer cards ROCm does not support): on a gfx90a the kernels then are not the MFMA
// (matrix-core) ones, or not gfx90a code at all.
void check_hsa_override(const Facts& f, Findings& out) {
  const std::string* v = env(f, "HSA_OVERRIDE_GFX_VERSION");
  if (!v) return;
  const bool kfd_gfx90a = std::count(f.host.kfd_gfx_target_versions.begin(), f.host.kfd_gfx_target_versions.end(), 90010) > 0;
  const bool runtime_gfx90a = std::any_of(f.gpu.devices.begin(), f.gpu.devices.end(),
                                          [](const auto& d) { return d.arch.rfind("gfx90a", 0) == 0; });
  if ((kfd_gfx90a || runtime_gfx90a) && *v != "9.0.10")
    add(out, "hsa_override_gfx_version", Level::kWarning,
        fmt::format("HSA_OVERRIDE_GFX_VERSION={} on a gfx90a (MI250) machine: the runtime treats the GPU as another "
                    "architecture, which disables the matrix cores (MFMA) plumb's gfx90a kernels use",
                    *v),
        "unset HSA_OVERRIDE_GFX_VERSION");
  else
    add(out, "hsa_override_gfx_version", Level::kNote, fmt::format("HSA_OVERRIDE_GFX_VERSION={} is set", *v));
}

void check_visible_devices(const Facts& f, Findings& out) {
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    const std::string* v = env(f, name);
    if (!v) continue;
    const bool hides_all = v->empty() || *v == "-1";
    const bool none_seen = !f.gpu.platform.empty() && f.gpu.devices.empty();
    if (hides_all || none_seen)
      add(out, "visible_devices", Level::kWarning,
          fmt::format("{}='{}'{}", name, *v, none_seen ? " and the runtime lists no device" : ": it hides every GPU"),
          fmt::format("unset {} (plumb uses the first visible device) or list the devices to use", name));
    else
      add(out, "visible_devices", Level::kNote,
          fmt::format("{}='{}': plumb sees only these devices and uses the first", name, *v));
  }
}

// Switches that serialize every kernel launch: right for debugging, ruinous for throughput.
void check_debug_switches(const Facts& f, Findings& out) {
  for (const char* name : {"CUDA_LAUNCH_BLOCKING", "PLUMB_GPU_SYNC"}) {
    const std::string* v = env(f, name);
    if (v && !v->empty() && *v != "0")
      add(out, "debug_switches", Level::kWarning,
          fmt::format("{}={}: every GPU operation waits for the device (debugging aid, much slower)", name, *v),
          fmt::format("unset {}", name));
  }
  for (const char* name : {"PLUMB_GPU_ORDER", "PLUMB_GPU_MOE", "CUDA_DEVICE_ORDER"})
    if (const std::string* v = env(f, name)) add(out, "debug_switches", Level::kNote, fmt::format("{}={}", name, *v));
}

// ---- host

// Every safetensors shard is mapped whole and the allocator maps large blocks one by one; the
// kernel's default of 65530 mappings is known to run out with big checkpoints and many threads.
void check_max_map_count(const Facts& f, Findings& out) {
  const auto& v = f.host.max_map_count;
  if (!v)
    add(out, "max_map_count", Level::kNote, "vm.max_map_count is not readable here");
  else if (*v < kMinMaxMapCount)
    add(out, "max_map_count", Level::kWarning,
        fmt::format("vm.max_map_count is {}, below {} (mmapped checkpoints and large allocations can fail with "
                    "ENOMEM long before memory is short)",
                    *v, kMinMaxMapCount),
        fmt::format("sudo sysctl -w vm.max_map_count={} (and put it in /etc/sysctl.d/ to keep it)", kMinMaxMapCount));
  else
    add(out, "max_map_count", Level::kOk, fmt::format("vm.max_map_count is {}", *v));
}

void check_governor(const Facts& f, Findings& out) {
  const auto& g = f.host.cpu_governors;
  if (g.empty()) {
    add(out, "cpu_governor", Level::kNote, "no CPU exposes a cpufreq governor (virtual machine or container)");
    return;
  }
  std::map<std::string, int> count;
  for (const std::string& s : g) ++count[s];
  std::vector<std::string> parts;
  for (const auto& [name, n] : count) parts.push_back(fmt::format("{} on {}", n, name));
  const std::string detail = fmt::format("CPU frequency governors: {}", fmt::join(parts, ", "));
  if (count.size() == 1 && count.count("performance"))
    add(out, "cpu_governor", Level::kOk, detail);
  else
    add(out, "cpu_governor", Level::kWarning,
        detail + " (not 'performance': clocks ramp down between the host's bursts of work, which slows the CPU "
                 "backend and the kernel launches of the GPU one)",
        "sudo cpupower frequency-set -g performance");
}

// 'never' puts the CPU backend's large activation and weight-decode buffers on 4 KiB pages (TLB
// misses); 'always' and 'madvise' are both fine for plumb.
void check_thp(const Facts& f, Findings& out) {
  if (f.host.thp_enabled.empty()) {
    add(out, "transparent_hugepages", Level::kNote, "transparent hugepages are not exposed here");
    return;
  }
  const std::string mode = selected_choice(f.host.thp_enabled);
  const std::string detail = fmt::format("transparent hugepages: enabled={}{}", mode,
                                         f.host.thp_defrag.empty() ? "" : ", defrag=" + selected_choice(f.host.thp_defrag));
  if (mode == "never")
    add(out, "transparent_hugepages", Level::kWarning, detail + " (large host buffers use 4 KiB pages)",
        "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled");
  else
    add(out, "transparent_hugepages", Level::kOk, detail);
}

// plumb serve holds a socket per stream (the server is meant for 1,000+ at once) beside the
// checkpoint's shard files; 1024, the usual default soft limit, is too few.
void check_open_files(const Facts& f, Findings& out) {
  const auto& l = f.host.open_files;
  if (!l) {
    add(out, "open_files", Level::kNote, "the open-file limit is not readable");
    return;
  }
  const std::string detail = fmt::format("open files: soft limit {}, hard {}", limit_text(l->soft, false), limit_text(l->hard, false));
  if (l->soft != ResourceLimit::kUnlimited && l->soft < kMinOpenFiles) {
    const bool hard_allows = l->hard == ResourceLimit::kUnlimited || l->hard >= 65536;
    add(out, "open_files", Level::kWarning,
        fmt::format("{}: below {}, too few for plumb serve's 1,000+ concurrent streams", detail, kMinOpenFiles),
        hard_allows ? "ulimit -n 65536 before plumb serve (systemd: LimitNOFILE=65536)"
                    : "raise the hard limit (/etc/security/limits.conf 'nofile', systemd LimitNOFILE=65536), then "
                      "ulimit -n 65536");
  } else {
    add(out, "open_files", Level::kOk, detail);
  }
}

// Pinned (page-locked) host memory: the GPU backend's upload staging ring and the runtimes' own
// pinned buffers; drivers that account pinned pages to RLIMIT_MEMLOCK fail those allocations
// (plumb then copies synchronously, slower) when the limit is a few MiB.
void check_locked_memory(const Facts& f, Findings& out) {
  const auto& l = f.host.locked_memory;
  if (!l) {
    add(out, "locked_memory", Level::kNote, "the locked-memory limit is not readable");
    return;
  }
  const std::string detail =
      fmt::format("locked memory: soft limit {}, hard {}", limit_text(l->soft, true), limit_text(l->hard, true));
  if (l->soft != ResourceLimit::kUnlimited && l->soft < kMinLockedMemory)
    add(out, "locked_memory", Level::kWarning,
        fmt::format("{}: below {}, pinned host buffers for GPU transfers may be refused", detail, bytes(kMinLockedMemory)),
        l->hard == ResourceLimit::kUnlimited ? "ulimit -l unlimited (systemd: LimitMEMLOCK=infinity)"
                                             : "raise 'memlock' in /etc/security/limits.conf (systemd: "
                                               "LimitMEMLOCK=infinity), then ulimit -l unlimited");
  else
    add(out, "locked_memory", Level::kOk, detail);
}

}  // namespace

const char* to_string(Level level) {
  switch (level) {
    case Level::kOk: return "ok";
    case Level::kNote: return "note";
    case Level::kWarning: return "warning";
    case Level::kError: return "error";
  }
  return "?";
}

bool targets_cover(const std::string& platform, const std::string& targets, const std::string& arch) {
  if (targets.empty()) return true;  // not recorded: nothing to judge
  std::vector<std::string> list;
  for (std::size_t at = 0; at <= targets.size();) {
    const std::size_t end = std::min(targets.find_first_of(",;", at), targets.size());
    if (end > at) list.push_back(targets.substr(at, end - at));
    at = end + 1;
  }
  if (platform == "hip") {
    const std::string base = arch.substr(0, arch.find(':'));  // gfx90a:sramecc+:xnack- -> gfx90a
    return std::find(list.begin(), list.end(), base) != list.end();
  }
  if (arch.rfind("sm_", 0) != 0) return true;  // an unknown naming: nothing to judge
  const int cc = std::atoi(arch.c_str() + 3);
  for (const std::string& t : list) {
    const std::size_t digits = t.find_first_not_of("0123456789");
    const int target = std::atoi(t.c_str());
    const bool arch_specific = digits != std::string::npos && t[digits] == 'a';  // 90a: sm_90 only
    if (t.find("virtual") != std::string::npos) {
      if (target <= cc && !arch_specific) return true;  // PTX is compiled for newer devices at load
    } else if (target == cc || (!arch_specific && target / 10 == cc / 10 && target <= cc)) {
      return true;  // SASS runs on its own major version at an equal or higher minor
    }
  }
  return false;
}

std::vector<Finding> run_checks(const Facts& f) {
  Findings out;
  check_gpu_runtime(f, out);
  for (const auto& d : f.gpu.devices) check_gpu_device(f, d, out);
  check_hsa_override(f, out);
  check_visible_devices(f, out);
  check_debug_switches(f, out);
  check_max_map_count(f, out);
  check_governor(f, out);
  check_thp(f, out);
  check_open_files(f, out);
  check_locked_memory(f, out);
  return out;
}

Tally tally(const std::vector<Finding>& findings) {
  Tally t;
  for (const Finding& x : findings) {
    t.warnings += x.level == Level::kWarning;
    t.errors += x.level == Level::kError;
  }
  return t;
}

int exit_code(const std::vector<Finding>& findings) {
  const Tally t = tally(findings);
  return t.errors > 0 ? 2 : t.warnings > 0 ? 1 : 0;
}

}  // namespace plumb::doctor
