#include "plumb/doctor/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/util/progress.h"

namespace plumb::doctor {
namespace {

using nlohmann::json;

json count(std::int64_t v) { return v < 0 ? json(nullptr) : json(v); }  // -1: not known

json limit_json(const std::optional<ResourceLimit>& l) {
  if (!l) return nullptr;
  const auto value = [](std::int64_t v) { return v == ResourceLimit::kUnlimited ? json(nullptr) : json(v); };
  return {{"soft", value(l->soft)}, {"hard", value(l->hard)}};
}

json device_json(const backend::GpuDeviceFacts& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"arch", d.arch},
          {"pci_bus_id", d.pci_bus_id},
          {"memory_total", count(d.memory_total)},
          {"memory_free", count(d.memory_free)},
          {"clock_mhz", count(d.clock_mhz)},
          {"memory_clock_mhz", count(d.memory_clock_mhz)},
          {"multiprocessors", d.multiprocessors},
          {"warp_size", d.warp_size},
          {"ecc", d.ecc < 0 ? json(nullptr) : json(d.ecc == 1)},
          {"pdl", d.pdl},
          {"error", d.error}};
}

std::string bytes(std::int64_t n) { return n < 0 ? "?" : format_bytes(static_cast<double>(n)); }

std::string device_text(const backend::GpuDeviceFacts& d) {
  std::string t = fmt::format("gpu {:<6}{} ({}, {} SMs, warp {})", d.index, d.name, d.arch, d.multiprocessors, d.warp_size);
  t += fmt::format(", {} ({} free)", bytes(d.memory_total), bytes(d.memory_free));
  if (d.clock_mhz > 0) t += fmt::format(", {} MHz", d.clock_mhz);
  if (d.memory_clock_mhz > 0) t += fmt::format(", memory {} MHz", d.memory_clock_mhz);
  if (d.ecc >= 0) t += d.ecc ? ", ECC on" : ", ECC off";
  if (d.pdl) t += ", programmatic dependent launch";
  if (!d.pci_bus_id.empty()) t += ", bus " + d.pci_bus_id;
  if (!d.error.empty()) t += "; " + d.error;
  return t + "\n";
}

}  // namespace

json report_json(const Facts& f, const std::vector<Finding>& findings) {
  json j;
  j["build"] = json::object();
  for (const auto& [k, v] : f.build) j["build"][k] = v;
  const backend::GpuFacts& g = f.gpu;
  j["gpu"] = {{"platform", g.platform},   {"targets", g.targets}, {"runtime_version", g.runtime_version},
              {"driver_version", g.driver_version}, {"error", g.error},     {"devices", json::array()}};
  for (const auto& d : g.devices) j["gpu"]["devices"].push_back(device_json(d));
  const HostFacts& h = f.host;
  j["host"] = {{"kernel", h.kernel},
               {"cpus", h.cpus},
               {"memory_total", count(h.memory_total)},
               {"memory_available", count(h.memory_available)},
               {"max_map_count", h.max_map_count ? json(*h.max_map_count) : json(nullptr)},
               {"cpu_governors", h.cpu_governors},
               {"transparent_hugepages", {{"enabled", h.thp_enabled}, {"defrag", h.thp_defrag}}},
               {"open_files", limit_json(h.open_files)},
               {"locked_memory", limit_json(h.locked_memory)},
               {"kfd_gfx_target_versions", h.kfd_gfx_target_versions},
               {"env", h.env}};
  j["checks"] = json::array();
  for (const Finding& x : findings)
    j["checks"].push_back({{"check", x.check}, {"level", to_string(x.level)}, {"detail", x.detail}, {"fix", x.fix}});
  const Tally n = tally(findings);
  j["summary"] = {{"warnings", n.warnings}, {"errors", n.errors}, {"exit_code", exit_code(findings)}};
  return j;
}

std::string facts_text(const Facts& f) {
  std::string t;
  for (const auto& [k, v] : f.build) t += fmt::format("build     {:<14} {}\n", k, v);
  const backend::GpuFacts& g = f.gpu;
  if (g.platform.empty()) {
    t += "gpu       none (built without a GPU backend)\n";
  } else {
    t += fmt::format("gpu       {} backend for {}; runtime {}, driver {}\n", g.platform, g.targets.empty() ? "?" : g.targets,
                     g.runtime_version.empty() ? "?" : g.runtime_version, g.driver_version.empty() ? "?" : g.driver_version);
    if (!g.error.empty()) t += fmt::format("gpu       {}\n", g.error);
  }
  for (const auto& d : g.devices) t += device_text(d);
  const HostFacts& h = f.host;
  t += fmt::format("host      {}, {} CPUs, {} memory ({} available)\n", h.kernel, h.cpus, bytes(h.memory_total),
                   bytes(h.memory_available));
  for (const auto& [k, v] : h.env) t += fmt::format("env       {}={}\n", k, v);
  return t;
}

std::string findings_text(const std::vector<Finding>& findings) {
  std::string t;
  for (const Finding& x : findings) {
    t += fmt::format("{:<8} {}\n", to_string(x.level), x.detail);
    if (!x.fix.empty()) t += fmt::format("{:<8} fix: {}\n", "", x.fix);
  }
  const Tally n = tally(findings);
  t += fmt::format("doctor: {} warning(s), {} error(s)\n", n.warnings, n.errors);
  return t;
}

}  // namespace plumb::doctor
