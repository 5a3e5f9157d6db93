#pragma once
// One rank's view of a `plumb convert shard` directory (model{r}-mp{N}.safetensors), for a
// multi-process layout of N model-group ranks (dist/parallel.h): rank r's file as it is (its
// routed experts, the replicated tensors), with every tensor the split rules cut (shard.h) made
// whole again from the N files' pieces, held in memory. The layouts split differently from the
// shard (they never sum partial results), so they take the whole tensors and slice them as they need.
#include <cstdint>
#include <string>

#include "plumb/convert/recognize.h"
#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"

namespace plumb::convert {

// A plumb::Error naming the problems when the set does not check (check_tp_shards).
Checkpoint open_tp_rank(const TpShardSet& set, int64_t rank, const ModelConfig& cfg);

}  // namespace plumb::convert
