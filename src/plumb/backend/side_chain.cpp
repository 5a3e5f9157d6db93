// SideChain (backend.h): a side chain's begin, end and join as one scope.
#include "plumb/backend/backend.h"

namespace plumb::backend {

SideChain::SideChain(Backend& be, int64_t rows) : be_(be) { be_.side_begin(rows); }

void SideChain::end() {
  if (!ended_) be_.side_end();
  ended_ = true;
}

void SideChain::join() {
  end();
  if (!joined_) be_.join();
  joined_ = true;
}

SideChain::~SideChain() {
  try {
    join();
  } catch (...) {  // (unwinding already: the first error is the one reported)
  }
}

}  // namespace plumb::backend
