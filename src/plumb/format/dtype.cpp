#include "plumb/format/dtype.h"

#include <array>
#include <utility>

namespace plumb {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 16> kInfo{{
    {DType::BOOL, "BOOL", 1, false},   {DType::U8, "U8", 1, false},
    {DType::I8, "I8", 1, false},       {DType::I16, "I16", 2, false},
    {DType::U16, "U16", 2, false},     {DType::I32, "I32", 4, false},
    {DType::U32, "U32", 4, false},     {DType::I64, "I64", 8, false},
    {DType::U64, "U64", 8, false},     {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},    {DType::F32, "F32", 4, true},
    {DType::F64, "F64", 8, true},      {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true}, {DType::F8_E8M0, "F8_E8M0", 1, true},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<std::size_t>(t)]; }

}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}
std::string_view dtype_name(DType t) { return info(t).name; }
std::size_t dtype_size(DType t) { return info(t).size; }
bool dtype_is_float(DType t) { return info(t).is_float; }

}  // namespace plumb
