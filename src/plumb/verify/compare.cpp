#include "plumb/verify/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plumb/util/error.h"

namespace plumb::verify {

Metrics compare(std::span<const float> got, std::span<const float> ref) {
  if (got.size() != ref.size()) fail("verify: comparing {} values against {}", got.size(), ref.size());
  Metrics m;
  m.n = static_cast<int64_t>(got.size());
  double dot = 0, gg = 0, rr = 0, dd = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = ref[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      ++m.nan;
      ++m.differing;
      continue;
    }
    if (a != b || std::signbit(a) != std::signbit(b)) ++m.differing;
    const double d = a - b;
    dot += a * b, gg += a * a, rr += b * b, dd += d * d;
    m.max_abs = std::max(m.max_abs, std::fabs(d));
    m.max_ref = std::max(m.max_ref, std::fabs(b));
  }
  // A NaN anywhere must never look like agreement: it makes every metric its worst value.
  if (m.nan > 0) {
    m.cosine = 0;
    m.max_abs = m.rel_l2 = std::numeric_limits<double>::infinity();
    return m;
  }
  // Bit-identical tensors are exactly 1 (the division below may round to 1 - ulp).
  if (m.differing == 0)
    m.cosine = 1;
  else if (gg == 0 && rr == 0)
    m.cosine = 1;
  else if (gg == 0 || rr == 0)
    m.cosine = 0;
  else
    m.cosine = std::clamp(dot / (std::sqrt(gg) * std::sqrt(rr)), -1.0, 1.0);
  m.rel_l2 = rr > 0 ? std::sqrt(dd) / std::sqrt(rr) : std::sqrt(dd);
  return m;
}

namespace {
// Lowest index among equal maxima (torch.argmax's rule, as the greedy sampler uses).
int64_t argmax_row(std::span<const float> v) {
  int64_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<std::size_t>(best)]) best = static_cast<int64_t>(i);
  return best;
}
}  // namespace

LogitsAgreement compare_logits(std::span<const float> got, std::span<const float> ref, int64_t vocab) {
  if (vocab <= 0 || got.size() != ref.size() || got.size() % static_cast<std::size_t>(vocab) != 0)
    fail("verify: logits of {} and {} values do not both hold rows of vocab {}", got.size(), ref.size(), vocab);
  LogitsAgreement la;
  la.positions = static_cast<int64_t>(got.size()) / vocab;
  for (int64_t t = 0; t < la.positions; ++t) {
    const auto g = got.subspan(static_cast<std::size_t>(t * vocab), static_cast<std::size_t>(vocab));
    const auto r = ref.subspan(static_cast<std::size_t>(t * vocab), static_cast<std::size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      const double d = std::fabs(double(g[i]) - double(r[i]));
      la.max_abs = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(la.max_abs, d);
      la.max_ref = std::max(la.max_ref, std::fabs(double(r[i])));
    }
    la.got_argmax.push_back(argmax_row(g));
    la.ref_argmax.push_back(argmax_row(r));
    if (la.got_argmax.back() == la.ref_argmax.back()) ++la.argmax_agree;
  }
  return la;
}

}  // namespace plumb::verify
