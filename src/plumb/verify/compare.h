#pragma once
// Metrics of `plumb verify`: how far a tensor computed by the backend under test (`got`) is from
// the same tensor computed by the reference (`ref`). Everything is accumulated in double so the
// metric itself adds no error worth mentioning next to the f32 values it measures.
#include <cstdint>
#include <span>
#include <vector>

namespace plumb::verify {

struct Metrics {
  int64_t n = 0;
  double cosine = 0;      // <got, ref> / (|got| |ref|); 1 when both are all zero; 0 on any NaN
  double max_abs = 0;     // max |got - ref| (inf on a NaN)
  double max_ref = 0;     // max |ref|
  double rel_l2 = 0;      // |got - ref| / |ref| (|got - ref| itself when ref is all zero)
  int64_t nan = 0;        // non-finite values in got or ref
  int64_t differing = 0;  // elements that are not bit-equal (exact for integer taps: top-k ids, experts)
};

// got and ref must have the same length (the caller checks shapes and names them).
Metrics compare(std::span<const float> got, std::span<const float> ref);

// End-to-end logits [T, vocab]: max |diff| / max |ref| over all positions and argmax per position.
struct LogitsAgreement {
  int64_t positions = 0;
  double max_abs = 0, max_ref = 0;
  std::vector<int64_t> got_argmax, ref_argmax;
  int64_t argmax_agree = 0;
  double rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};
LogitsAgreement compare_logits(std::span<const float> got, std::span<const float> ref, int64_t vocab);

}  // namespace plumb::verify
