// SafetensorsWriter: produces files the reference implementation (and our reader) accept.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "plumb/format/json_util.h"
#include "plumb/format/safetensors.h"
#include "plumb/format/safetensors_stream_writer.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

// Closes the descriptor and removes the temporary file unless the write completed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create: {}", path_, std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(path_.c_str());
  }
  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("{}: write failed: {}", path_, std::strerror(errno));
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void commit(const std::string& final_path) {
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
    if (std::rename(path_.c_str(), final_path.c_str()) != 0)
      fail("{}: cannot rename {} into place: {}", final_path, path_, std::strerror(errno));
    done_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool done_ = false;
};

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> data) {
  if (name == "__metadata__") fail("safetensors writer: '__metadata__' is reserved and cannot name a tensor");
  if (names_.contains(name)) fail("safetensors writer: tensor {} added twice", quote(name));
  TensorInfo probe{.name = name, .dtype = dtype, .shape = shape};
  uint64_t want = dtype_size(dtype);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(want, static_cast<uint64_t>(d), &want))
      fail("safetensors writer: tensor {}: invalid shape {}", quote(name), probe.shape_str());
  if (data.size() != want)
    fail("safetensors writer: tensor {}: shape {} of {} needs {} bytes, got {}", quote(name), probe.shape_str(),
         dtype_name(dtype), want, data.size());
  names_.insert(name);
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(data)});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<SafetensorsEntry> layout;
  layout.reserve(entries_.size());
  for (const auto& e : entries_) layout.push_back({e.name, e.dtype, e.shape});
  const std::string head = encode_safetensors_header(layout, metadata_, path);
  TempFile out(path + ".tmp");
  out.write(head.data(), head.size());
  for (const auto& e : entries_) out.write(e.data.data(), e.data.size());
  out.commit(path);
}

}  // namespace plumb
