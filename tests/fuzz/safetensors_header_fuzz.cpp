// libFuzzer target for the safetensors header parser. Each input is used twice:
//  1. as a whole file image (8-byte length, header, data), exactly as a file on disk would be;
//  2. as the header JSON alone, against a fixed-size data section, so that mutations of the JSON
//     are not all rejected early for a length prefix that no longer matches.
// The parser must accept the input or throw plumb::Error; anything else (another exception, a
// sanitizer report) is a bug. Accepted results are checked against the guarantees the parser
// documents, so a "successful" parse of a bad header is caught too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"

namespace {

constexpr uint64_t kDataSize = 1 << 16;  // data section size for the header-only mode

// Tensors lie inside [data_start, data_end), sorted by offset, sized numel * dtype size, and
// nonempty ones do not overlap.
void check_invariants(const std::vector<plumb::TensorInfo>& tensors, uint64_t data_start, uint64_t data_end) {
  uint64_t prev_begin = 0, furthest_end = 0;
  for (const auto& t : tensors) {
    bool ok = t.data_begin >= data_start && t.data_begin <= data_end && t.nbytes <= data_end - t.data_begin &&
              t.data_begin >= prev_begin && t.numel() >= 0 &&
              t.nbytes == static_cast<uint64_t>(t.numel()) * plumb::dtype_size(t.dtype) &&
              (t.nbytes == 0 || t.data_begin >= furthest_end);
    if (!ok) std::abort();
    prev_begin = t.data_begin;
    if (t.nbytes > 0) furthest_end = std::max(furthest_end, t.data_begin + t.nbytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> metadata;
  try {
    std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
    check_invariants(plumb::parse_safetensors_image(image, "fuzz.safetensors", &metadata), 8, size);
  } catch (const plumb::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  try {
    std::string_view header(reinterpret_cast<const char*>(data), size);
    uint64_t data_start = 8 + size;
    check_invariants(plumb::parse_safetensors_header(header, data_start, kDataSize, "fuzz.safetensors", &metadata),
                     data_start, data_start + kDataSize);
  } catch (const plumb::Error&) {
  }
  return 0;
}
