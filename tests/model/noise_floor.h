#pragma once
// The bars of the faithful golden tests, from measured noise floors (issue 13, docs/CORRECTNESS.md
// "Thresholds of the faithful tests").
//
// A golden made by the release's own code and plumb's `faithful` logits follow the same rounding
// rules but sum their f32 reductions in different orders, and the profile's re-quantization turns
// some one-ulp differences into whole quantization steps. How far a change of summation order alone
// moves the logits was measured on every golden prompt, by both sides:
//   - the release's: its code run by torch on the CPU instead of the GPU, and with one f32 GEMM
//     instead of its blockwise one (meta.json, by tools/golden/make_v4_faithful.py / make_v4_release.py);
//   - plumb's: `plumb logits` with PLUMB_CPU_ORDER summing linear, gate, norm, mHC, attention
//     scores or MLA reversed or in blocks of 32, against its canonical order (order_floor.json, by
//     tools/golden/order_floor.py).
// The floor of a prompt is the worst of these samples. A bar set exactly at the worst of K samples
// would reject another draw of the same noise with probability 1/(K+1) per prompt, so the bar
// allows kFloorMargin times the floor's deviation: cosine >= 1 - kFloorMargin (1 - floor cosine),
// argmax agreement >= positions - kFloorMargin (positions - the floor's fewest equal argmax).
// Where every sample is bitwise equal, the floor is bitwise and so is the bar.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace plumb::test {

constexpr double kFloorMargin = 2.0;

// One measurement of the same computation in another summation order.
struct FloorSample {
  std::string what;
  double cosine = 1;
  int64_t argmax_agreement = 0;
  bool bitwise = true;
  double max_abs_diff = 0;
};

struct FloorBar {
  bool bitwise = false;      // the floor is bitwise: demand bitwise equality
  double cosine = 1;         // otherwise cosine >= this
  int64_t argmax = 0;        // and argmax agreement >= this
  double floor_cosine = 1;   // the worst sample, for the printout
  std::string floor_what;    // which sample it is
  std::size_t samples = 0;
};

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) {
    ADD_FAILURE() << "missing " << p << " (tools/golden/order_floor.py --write makes order_floor.json)";
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(in);
}

// plumb's other-order samples of prompt `len` from <golden_dir>/order_floor.json.
inline std::vector<FloorSample> plumb_order_samples(const std::filesystem::path& golden_dir, const std::string& len) {
  const nlohmann::json j = read_json(golden_dir / "order_floor.json");
  std::vector<FloorSample> out;
  if (!j.contains("prompts") || !j["prompts"].contains(len)) {
    ADD_FAILURE() << golden_dir / "order_floor.json" << " has no prompt " << len << ": rerun tools/golden/order_floor.py";
    return out;
  }
  for (const auto& [order, v] : j["prompts"][len]["orders"].items()) {
    const auto& c = v.at("vs_canonical");
    out.push_back({"plumb PLUMB_CPU_ORDER=" + order, c.at("cosine").get<double>(), c.at("argmax_agreement").get<int64_t>(),
                   c.at("bitwise").get<bool>(), c.at("max_abs_diff").get<double>()});
  }
  return out;
}

inline FloorBar floor_bar(const std::vector<FloorSample>& samples, int64_t positions) {
  FloorBar b;
  b.samples = samples.size();
  b.bitwise = !samples.empty();
  int64_t fewest = positions;
  for (const FloorSample& s : samples) {
    b.bitwise = b.bitwise && s.bitwise;
    if (s.cosine < b.floor_cosine || b.floor_what.empty()) b.floor_cosine = s.cosine, b.floor_what = s.what;
    fewest = std::min(fewest, s.argmax_agreement);
  }
  b.cosine = 1 - kFloorMargin * (1 - b.floor_cosine);
  b.argmax = std::max<int64_t>(0, positions - static_cast<int64_t>(kFloorMargin * static_cast<double>(positions - fewest)));
  return b;
}

// The largest |logit difference| among the samples that kept every argmax (the aligned fixture's
// greedy test: a choice whose top-2 gap exceeds it is decided beyond the floor).
inline double floor_spread(const std::vector<FloorSample>& samples, int64_t positions) {
  double spread = 0;
  for (const FloorSample& s : samples)
    if (s.argmax_agreement == positions) spread = std::max(spread, s.max_abs_diff);
  return spread;
}

}  // namespace plumb::test
