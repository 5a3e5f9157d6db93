#pragma once
// Reading a source checkpoint for conversion: which tensors are quantized weights and which are
// their scales (V4 `X.weight` + `X.scale`, V3 `X.weight` + `X.weight_scale_inv`), routed expert
// ids, and bounded-memory access to tensor bytes through the checkpoint's mappings.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "plumb/format/safetensors.h"

namespace plumb::convert {

enum class QuantFormat {
  FP8Block128,  // F8_E4M3 [rows, cols] + scales [ceil(rows/128), ceil(cols/128)], E8M0 or F32
  FP4Block32,   // I8 packed e2m1 [rows, cols/2] + E8M0 scales [rows, ceil(cols/32)]
};

struct QuantizedTensor {
  const TensorInfo* weight = nullptr;
  const TensorInfo* scale = nullptr;
  QuantFormat format = QuantFormat::FP8Block128;
  int64_t rows = 0, cols = 0;  // logical (FP4: cols = 2 x stored bytes per row)
  // Stored elements of the weight covered by one scale along dims 0 and 1: 128x128 for FP8,
  // 1x16 bytes (1x32 values) for FP4.
  int64_t block_rows() const { return format == QuantFormat::FP8Block128 ? 128 : 1; }
  int64_t block_cols() const { return format == QuantFormat::FP8Block128 ? 128 : 16; }
};

// Every quantized weight of a checkpoint with its scale, validated (dtypes, 2-D shapes, scale
// grid). An F8_E4M3 weight without a scale, or a scale tensor without its weight, is an error
// naming the tensor: converting such a checkpoint would silently change its values.
class QuantMap {
 public:
  explicit QuantMap(const Checkpoint& ckpt);
  const QuantizedTensor* weight(const std::string& name) const;          // nullptr if not a quantized weight
  const QuantizedTensor* scale_of(const std::string& scale_name) const;  // its weight's entry, or nullptr
  bool is_scale(const std::string& name) const { return scale_of(name) != nullptr; }
  std::size_t count(QuantFormat f) const;

 private:
  std::map<std::string, QuantizedTensor> by_weight_;
  std::map<std::string, std::string> weight_of_scale_;
};

// The id of a routed expert tensor (`...experts.{id}....`, not `shared_experts`), else nullopt.
std::optional<int64_t> routed_expert_id(const std::string& name);

// A source tensor's bytes, read through the checkpoint's mapping. Touched pages stay mapped, and
// counted in RSS, until released: without release() a conversion's RSS grows to the checkpoint's
// size. The kernel may map a whole large page-cache folio (up to 2 MB) around a touched byte, so
// release() widens the range by that much on each side, clamped to this file's mapping (dropping
// a neighbour's pages only costs a re-fault from the page cache; the data stays cached).
class SourceTensor {
 public:
  SourceTensor(const Checkpoint& ckpt, const TensorInfo& t);
  std::span<const std::byte> bytes() const { return bytes_; }
  void release(std::span<const std::byte> part) const;  // part lies within bytes()
  void release() const { release(bytes_); }
  // Calls `fn` on consecutive pieces of at most `piece` bytes of `part`, releasing each after.
  void for_each_piece(std::span<const std::byte> part, std::size_t piece,
                      const std::function<void(std::span<const std::byte>)>& fn) const;

 private:
  std::span<const std::byte> bytes_, mapping_;
};

// Piece size for plain copies: large enough for sequential I/O, small next to any RAM.
inline constexpr std::size_t kCopyPieceBytes = 16u << 20;

}  // namespace plumb::convert
