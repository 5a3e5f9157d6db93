#include "plumb/model/state_v4.h"

#include "plumb/model/state_copy.h"

namespace plumb::v4 {

SequenceState copy_state(backend::Backend& be, const SequenceState& s) {
  SequenceState out;
  out.pos = s.pos;
  for (const LayerState& l : s.layers)
    out.layers.push_back({copy_tensor(be, l.window), copy_compressor(be, l.compressor),
                          copy_compressor(be, l.index_compressor), copy_tensor(be, l.recent)});
  return out;
}

}  // namespace plumb::v4
