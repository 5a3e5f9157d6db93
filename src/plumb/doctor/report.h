#pragma once
// plumb doctor's two renderings of the facts and the findings: text for people, JSON for tools
// (its keys are a stable interface: "build", "gpu", "host", "checks", "summary").
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plumb/doctor/checks.h"

namespace plumb::doctor {

// Byte counts and limits are numbers; an unlimited resource limit is null.
nlohmann::json report_json(const Facts& facts, const std::vector<Finding>& findings);

// The facts (build, runtime, each GPU, host, the environment variables set), then one line per
// finding with its fix below it, then the count of warnings and errors.
std::string facts_text(const Facts& facts);
std::string findings_text(const std::vector<Finding>& findings);

}  // namespace plumb::doctor
