#pragma once
// What `plumb verify` found, and its three renderings: OUTDIR/verify.json (for tools),
// verify.md (for review threads) and verify.html (self-contained: inline SVG chart, no assets).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plumb/util/token_id.h"
#include "plumb/verify/compare.h"

namespace plumb::verify {

using Facts = std::vector<std::pair<std::string, std::string>>;

struct TapResult {
  std::string name;            // in forward order
  std::vector<int64_t> shape;  // the tested side's shape
  Metrics m;
  bool compared = true;  // false: the reference has no such tap (see note)
  bool pass = false;     // compared and cosine >= threshold (and no NaN)
  bool informational = false;  // integer selections (top-k ids, experts): reported, not judged
  std::string note;
};

struct VerifyReport {
  // what was compared
  std::string model, model_type, backend, against, numerics;
  double threshold = 0.999;
  std::vector<TokenId> ids;
  // per-tap comparison (empty for models whose runner has no taps; notes say so)
  std::vector<TapResult> taps;
  std::optional<LogitsAgreement> logits;
  // greedy decoding: only when the reference is a live run (dumps hold no tokens)
  bool greedy_compared = false;
  int64_t steps = 0;
  std::vector<TokenId> greedy_got, greedy_ref;
  // audit
  Facts facts_got, facts_ref, audit;
  std::vector<std::string> notes;

  bool taps_pass() const;
  bool greedy_agree() const { return !greedy_compared || greedy_got == greedy_ref; }
  bool passed() const { return taps_pass() && greedy_agree(); }
  // The first tap (forward order) that was compared and failed; empty when none.
  std::string first_failing_tap() const;
  // Index of the first generated token where the two sides differ; -1 when they agree.
  int64_t first_greedy_divergence() const;
};

// Git revision, build type, compiler, C++ flags and plumb version of this binary, plus the UTC
// date now.
Facts build_facts();

// Writes verify.json, verify.md and verify.html into dir (created if needed); plumb::Error when
// it cannot.
void write_reports(const VerifyReport& r, const std::string& dir);

// The individual renderings (for tests and for callers that want one).
std::string report_json(const VerifyReport& r);
std::string report_markdown(const VerifyReport& r);
std::string report_html(const VerifyReport& r);

}  // namespace plumb::verify
