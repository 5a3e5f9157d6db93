#pragma once
// One engine over a model split across the ranks of a model group (--tp / --ep, dist/parallel.h)
// when only rank 0 sees the requests (plumb serve: rank 0 serves HTTP). Rank 0 runs the engine
// (scheduler, sampling, constraints, tokenizer) on lead_model_group()'s EngineModel, which sends
// every model call (new sequence, fork, forward with its chunks and block tables, the KV layout,
// dropped sequences) to the other ranks before making it itself; the other ranks run
// follow_model_group(), which makes the same calls on their part of the model in the same order.
// So every rank takes part in each forward's collectives with the same batch, and the tokens,
// chosen on rank 0 alone, are the ones one process chooses (the layouts' logits are bitwise).
//
// Protocol: per call, a broadcast of a fixed header (operation, payload bytes) from rank 0, then
// of the payload. Sequences are named by ids rank 0 hands out; a dropped sequence's id rides on
// the next call. The lead model's destruction sends `end`, which returns follow_model_group().
// The ranks cannot recover lockstep after a failed model call, so a failure on any rank ends
// every rank (Communicator::abort) with its message.
#include <memory>

#include "plumb/dist/communicator.h"
#include "plumb/runtime/engine_model.h"

namespace plumb::runtime {

// Rank 0 of `group`: `local` (this rank's part of the model) wrapped so that every call is
// mirrored to the other ranks. `group` must outlive the returned model.
std::unique_ptr<EngineModel> lead_model_group(std::unique_ptr<EngineModel> local, dist::Communicator& group);

// Every other rank of `group`: makes rank 0's calls on `local` until rank 0's model ends.
void follow_model_group(EngineModel& local, dist::Communicator& group);

}  // namespace plumb::runtime
