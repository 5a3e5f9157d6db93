// plumb doctor [--model DIR] [--json]: the build, the GPU runtime and devices, and the host
// settings that bite (each warning with its fix); with --model also the checkpoint summary and
// scan of `plumb inspect --scan`. Exit 0 all good, 1 warnings, 2 errors.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "inspect_report.h"
#include "plumb/doctor/checks.h"
#include "plumb/doctor/report.h"
#include "plumb/util/error.h"
#include "plumb/verify/report.h"

namespace plumb::cli {
namespace {

struct DoctorArgs {
  std::string model;
  bool json = false;
};

doctor::Facts gather_facts() {
  doctor::Facts f;
  f.build = verify::build_facts();
  f.gpu = backend::query_gpu_facts();
  f.host = read_host_facts();
  return f;
}

// The checkpoint's summary and scan, and a finding for its verdict.
doctor::Finding check_model(const std::string& dir, bool json, nlohmann::json& j, std::string& text) {
  try {
    const InspectReport r = inspect_checkpoint(dir, {false, true, !json});
    j = r.json;
    text = r.text;
    if (!r.problem.empty()) return {"model", doctor::Level::kError, r.problem, "plumb inspect --scan " + dir + " for the details"};
    return {"model", doctor::Level::kOk, dir + ": matches its config; scan found no NaN/Inf and no bad scale", ""};
  } catch (const Error& e) {
    return {"model", doctor::Level::kError, e.what(), "point --model at a checkpoint directory (config.json + *.safetensors)"};
  }
}

int run_doctor(const DoctorArgs& a) {
  const doctor::Facts facts = gather_facts();
  std::vector<doctor::Finding> findings = doctor::run_checks(facts);
  nlohmann::json model_json;
  std::string model_text;
  if (!a.model.empty()) findings.push_back(check_model(a.model, a.json, model_json, model_text));
  if (a.json) {
    nlohmann::json j = doctor::report_json(facts, findings);
    if (!a.model.empty()) j["model"] = model_json;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::string t = doctor::facts_text(facts);
    if (!model_text.empty()) t += "\n" + model_text;
    t += "\n" + doctor::findings_text(findings);
    std::fputs(t.c_str(), stdout);
  }
  return doctor::exit_code(findings);
}

}  // namespace

Runner register_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Check the build, the GPUs and the host settings plumb depends on");
  auto a = std::make_shared<DoctorArgs>();
  cmd->add_option("--model", a->model, "also summarize and scan this checkpoint (as plumb inspect --scan)");
  cmd->add_flag("--json", a->json, "machine-readable output");
  return [a]() { return run_doctor(*a); };
}

}  // namespace plumb::cli
