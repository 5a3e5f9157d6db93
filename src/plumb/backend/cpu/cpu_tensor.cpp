#include "plumb/backend/cpu/cpu_tensor.h"

#include <memory>

#include "plumb/util/error.h"

namespace plumb::cpu {

namespace {
CpuStorage* storage_of(const Tensor& t, ElemType want, const char* what) {
  if (!t.defined()) fail("{} is undefined", what);
  auto* s = dynamic_cast<CpuStorage*>(t.storage());
  if (!s) fail("{} {} does not live on the CPU backend", what, t.shape_str());
  if (t.type() != want) fail("{} {} has the wrong element type", what, t.shape_str());
  return s;
}
}  // namespace

Tensor new_f32(Shape shape, float fill) {
  auto s = std::make_shared<CpuStorage>();
  s->f.assign(static_cast<std::size_t>(backend::element_count(shape)), fill);
  return Tensor(std::move(s), ElemType::F32, std::move(shape));
}

Tensor new_i32(Shape shape, int32_t fill) {
  auto s = std::make_shared<CpuStorage>();
  s->i.assign(static_cast<std::size_t>(backend::element_count(shape)), fill);
  return Tensor(std::move(s), ElemType::I32, std::move(shape));
}

float* f32(const Tensor& t, const char* what) { return storage_of(t, ElemType::F32, what)->f.data(); }
int32_t* i32(const Tensor& t, const char* what) { return storage_of(t, ElemType::I32, what)->i.data(); }
void* bytes(const Tensor& t, const char* what) {
  return t.type() == ElemType::F32 ? static_cast<void*>(f32(t, what)) : static_cast<void*>(i32(t, what));
}

}  // namespace plumb::cpu
