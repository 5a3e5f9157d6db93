#include "plumb/verify/tap_dump.h"

#include <filesystem>

#include "plumb/format/npy.h"
#include "plumb/util/error.h"

namespace plumb {

Taps npy_tap_writer(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the taps directory: {}", dir, ec.message());
  return Taps([dir](const std::string& name, const float* data, const std::vector<int64_t>& shape) {
    write_f32_npy((std::filesystem::path(dir) / (name + ".npy")).string(), shape, data);
  });
}

}  // namespace plumb
