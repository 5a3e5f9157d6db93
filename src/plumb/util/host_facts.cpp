#include "plumb/util/host_facts.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace plumb {
namespace {

namespace fs = std::filesystem;

// Kernel files are small; the bound only guards against a path that is not one.
std::optional<std::string> read_small(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::string s(64 * 1024, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(f.gcount()));
  return s;
}

std::string trimmed(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::optional<std::int64_t> parse_int(const std::string& s) {
  const std::string t = trimmed(s);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::optional<ResourceLimit> read_limit(int resource) {
  rlimit r{};
  if (getrlimit(resource, &r) != 0) return std::nullopt;
  const auto value = [](rlim_t v) {
    return v == RLIM_INFINITY ? ResourceLimit::kUnlimited : static_cast<std::int64_t>(v);
  };
  return ResourceLimit{value(r.rlim_cur), value(r.rlim_max)};
}

// cpu0, cpu1, ... in numeric order (directory order is arbitrary).
std::vector<std::string> read_governors(const fs::path& cpu_dir) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cpu_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
        !std::all_of(name.begin() + 3, name.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    if (const auto g = read_small(e.path() / "cpufreq" / "scaling_governor"))
      found.emplace_back(std::stol(name.substr(3)), trimmed(*g));
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [cpu, governor] : found) out.push_back(std::move(governor));
  return out;
}

// gfx_target_version of every KFD node that has one (CPU nodes report 0).
std::vector<std::int64_t> read_kfd_targets(const fs::path& nodes) {
  std::vector<std::int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(nodes, ec)) {
    const auto props = read_small(e.path() / "properties");
    if (!props) continue;
    std::istringstream lines(*props);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string key;
      std::int64_t value = 0;
      if (words >> key >> value && key == "gfx_target_version" && value != 0) out.push_back(value);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

const std::vector<std::string>& doctor_env_names() {
  static const std::vector<std::string> names = {
      "HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
      "CUDA_DEVICE_ORDER",        "CUDA_LAUNCH_BLOCKING", "PLUMB_GPU_SYNC",      "PLUMB_GPU_ORDER",
      "PLUMB_GPU_MOE"};
  return names;
}

std::string selected_choice(const std::string& kernel_list) {
  const auto open = kernel_list.find('['), close = kernel_list.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return trimmed(kernel_list);
  return kernel_list.substr(open + 1, close - open - 1);
}

std::int64_t resident_set_bytes(const HostPaths& paths) {
  const auto statm = read_small(fs::path(paths.proc) / "self" / "statm");
  if (!statm) return -1;
  std::istringstream in(*statm);
  std::int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return -1;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

HostMemory read_host_memory(const HostPaths& paths) {
  HostMemory m;
  const auto info = read_small(fs::path(paths.proc) / "meminfo");
  if (!info) return m;
  std::istringstream lines(*info);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string key;
    std::int64_t kib = 0;
    if (!(words >> key >> kib)) continue;
    if (key == "MemTotal:") m.total = kib * 1024;
    if (key == "MemAvailable:") m.available = kib * 1024;
  }
  return m;
}

HostFacts read_host_facts(const HostPaths& paths) {
  HostFacts h;
  for (const std::string& name : doctor_env_names())
    if (const char* v = std::getenv(name.c_str())) h.env[name] = v;
  const fs::path proc(paths.proc), sys(paths.sys);
  if (const auto v = read_small(proc / "sys" / "vm" / "max_map_count")) h.max_map_count = parse_int(*v);
  h.cpu_governors = read_governors(sys / "devices" / "system" / "cpu");
  h.thp_enabled = trimmed(read_small(sys / "kernel" / "mm" / "transparent_hugepage" / "enabled").value_or(""));
  h.thp_defrag = trimmed(read_small(sys / "kernel" / "mm" / "transparent_hugepage" / "defrag").value_or(""));
  h.open_files = read_limit(RLIMIT_NOFILE);
  h.locked_memory = read_limit(RLIMIT_MEMLOCK);
  h.kfd_gfx_target_versions = read_kfd_targets(sys / "class" / "kfd" / "kfd" / "topology" / "nodes");
  h.cpus = std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 0);
  const HostMemory m = read_host_memory(paths);
  h.memory_total = m.total;
  h.memory_available = m.available;
  utsname u{};
  if (uname(&u) == 0) h.kernel = std::string(u.sysname) + " " + u.release;
  return h;
}

}  // namespace plumb
