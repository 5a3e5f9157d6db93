// Default bodies of the Backend's optional ops (backend.h): a clear refusal naming the backend.
#include "plumb/backend/backend.h"
#include "plumb/util/error.h"

namespace plumb::backend {

Tensor Backend::moe_terms(const Tensor&, const Routing&, std::span<const SwiGluWeights>, std::pair<int64_t, int64_t>,
                          const MoeParams&) {
  fail("the {} backend has no moe_terms: expert and tensor parallelism (--ep / --tp) run on the cpu backend", name());
}

Tensor Backend::moe_combine(const Tensor&, const Routing&, const Tensor&, const SwiGluWeights&, const MoeParams&) {
  fail("the {} backend has no moe_combine: expert and tensor parallelism (--ep / --tp) run on the cpu backend",
       name());
}

}  // namespace plumb::backend
