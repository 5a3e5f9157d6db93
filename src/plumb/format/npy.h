#pragma once
// .npy files (NumPy format 1.0/2.0/3.0): ids in, logits and taps out. Little-endian, C order.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plumb/format/dtype.h"
#include "plumb/util/token_id.h"

namespace plumb {

struct NpyArray {
  DType dtype = DType::F32;  // F32, F64, F16, I64, I32, I16, I8, U8, BOOL ...
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
  int64_t numel() const;
};

NpyArray read_npy(const std::string& path);  // plumb::Error naming the file on bad input
// The same from the bytes of a whole .npy file; `path` names it in errors.
NpyArray parse_npy(std::span<const std::byte> file, const std::string& path);
void write_npy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data);

// Convenience: token ids from an int32/int64 .npy of shape [T] (or [1, T]); errors name the file.
std::vector<TokenId> read_token_ids(const std::string& path);
inline void write_f32_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  write_npy(path, DType::F32, shape, data);
}

}  // namespace plumb
