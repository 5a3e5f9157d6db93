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

void check_copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  if (dst.row_size() != src.row_size())
    fail("copy_rows: row sizes differ ({} vs {})", dst.shape_str(), src.shape_str());
  if (n < 0 || dst_row < 0 || src_row < 0 || dst_row + n > dst.rows() || src_row + n > src.rows())
    fail("copy_rows: rows [{}, +{}) of {} into [{}, +{}) of {} out of range", src_row, n, src.shape_str(), dst_row, n,
         dst.shape_str());
}

std::string Tensor::shape_str() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

}  // namespace plumb::backend
