#pragma once
// `plumb verify`: runs one prompt through a model on the backend under test and on a reference
// (a live run on another backend, or the taps a `plumb logits --dump-taps` run wrote), and
// compares every tap, the logits and greedy decoding.
#include <cstdint>
#include <string>
#include <vector>

#include "plumb/util/token_id.h"
#include "plumb/verify/report.h"

namespace plumb::verify {

struct VerifyOptions {
  std::string model;  // checkpoint directory
  std::string backend = "cuda";
  std::string against = "cpu";  // reference backend (ignored when against_dumps is set)
  std::string against_dumps;    // DIR of <tap>.npy written by `plumb logits --dump-taps DIR`
  std::string numerics = "reference";
  std::vector<TokenId> ids;
  int threads = 0;
  int64_t steps = 16;
  double threshold = 0.999;
  // Every layer of the tested side starts from the reference's residual stream (its layer.L.hc
  // taps), so each layer is compared on equal inputs (Taps::ReplaceFn).
  bool isolate_layers = false;
  std::string command_line;  // recorded in the audit facts
  bool progress = true;      // messages on stderr
};

// plumb::Error for bad input (missing model, ids outside the vocabulary, a dump directory
// without logits.npy, shapes that disagree with the dumps).
VerifyReport run_verify(const VerifyOptions& opt);

}  // namespace plumb::verify
