// libFuzzer target for .npy parsing (token ids, tap dumps). The parser must accept the input or
// throw plumb::Error; an accepted array must hold exactly numel x dtype-size bytes, and token ids
// read from it must be in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "plumb/format/npy.h"
#include "plumb/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const plumb::NpyArray a = plumb::parse_npy({reinterpret_cast<const std::byte*>(data), size}, "fuzz.npy");
    uint64_t n = 1;
    for (int64_t d : a.shape) {
      if (d < 0) std::abort();
      n *= static_cast<uint64_t>(d);
    }
    if (a.numel() < 0 || static_cast<uint64_t>(a.numel()) != n || a.data.size() != n * plumb::dtype_size(a.dtype))
      std::abort();
  } catch (const plumb::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
