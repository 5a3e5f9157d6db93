#pragma once
// CPU tensors: host vectors behind the Tensor handle, and checked accessors for the CPU ops.
#include <cstdint>
#include <vector>

#include "plumb/backend/tensor.h"

namespace plumb::cpu {

using backend::ElemType;
using backend::Shape;
using backend::Tensor;

struct CpuStorage : backend::Storage {
  std::vector<float> f;
  std::vector<int32_t> i;
};

Tensor new_f32(Shape shape, float fill = 0.f);
Tensor new_i32(Shape shape, int32_t fill = 0);

// Element pointers; a plumb::Error if t is not a CPU tensor of that type. `what` names the
// operand in the message.
float* f32(const Tensor& t, const char* what = "tensor");
int32_t* i32(const Tensor& t, const char* what = "tensor");
// The elements of either type as raw memory (4 bytes each): row copies and encoded cache rows.
void* bytes(const Tensor& t, const char* what = "tensor");

}  // namespace plumb::cpu
