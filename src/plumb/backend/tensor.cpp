#include "plumb/backend/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/util/error.h"

namespace plumb::backend {

Tensor Tensor::reshaped(Shape shape) const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n != numel()) fail("reshape: {} has {} elements, cannot view as [{}]", shape_str(), numel(), fmt::join(shape, ", "));
  return Tensor(storage_, type_, std::move(shape));
}

int64_t element_count(const Shape& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) fail("negative tensor dimension {}", d);
    n *= d;
  }
  return n;
}

std::string Tensor::shape_str() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

}  // namespace plumb::backend
