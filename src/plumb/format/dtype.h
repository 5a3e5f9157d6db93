#pragma once
// Element types as named in safetensors headers. Sizes are per stored element (I8 holding packed
// FP4 is one byte per *two* logical values; that packing is a weight-format concern, not a dtype).
#include <cstddef>
#include <optional>
#include <string_view>

namespace plumb {

enum class DType {
  BOOL, U8, I8, I16, U16, I32, U32, I64, U64,
  F16, BF16, F32, F64,
  F8_E4M3, F8_E5M2, F8_E8M0,
};

std::optional<DType> dtype_from_name(std::string_view name);  // "BF16" -> DType::BF16
std::string_view dtype_name(DType t);
std::size_t dtype_size(DType t);
bool dtype_is_float(DType t);  // floating types whose values can be NaN/Inf-scanned

}  // namespace plumb
