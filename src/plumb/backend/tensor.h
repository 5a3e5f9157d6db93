#pragma once
// Tensor: a handle to backend-owned memory (shape + element type + opaque storage). The model
// never touches the elements; it moves data in and out only through Backend::from_host/to_host.
// Handles are cheap to copy and share their storage.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace plumb::backend {

using Shape = std::vector<int64_t>;

// Activations are F32 handles on every backend; a backend may keep a narrower representation
// internally as long as the values are those the op's rounding mode produces (see Round).
enum class ElemType { F32, I32 };

// Backend-specific memory. Each backend defines its own subclass.
struct Storage {
  virtual ~Storage() = default;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, ElemType type, Shape shape)
      : storage_(std::move(storage)), type_(type), shape_(std::move(shape)) {}

  bool defined() const { return storage_ != nullptr; }
  ElemType type() const { return type_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<std::size_t>(i < 0 ? rank() + i : i)); }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape_) n *= d;
    return n;
  }
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  int64_t row_size() const {  // elements per row (product of the dims after the first)
    int64_t n = 1;
    for (std::size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
    return n;
  }
  Storage* storage() const { return storage_.get(); }

  // The same elements under another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  std::string shape_str() const;

 private:
  std::shared_ptr<Storage> storage_;
  ElemType type_ = ElemType::F32;
  Shape shape_;
};

// Elements of a shape; a plumb::Error for a negative dimension (what every backend's allocation
// checks).
int64_t element_count(const Shape& shape);

}  // namespace plumb::backend
