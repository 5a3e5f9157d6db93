// SafetensorsWriter: produces files the reference implementation (and our reader) accept.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "plumb/format/json_util.h"
#include "plumb/format/safetensors.h"
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
  // ordered_json keeps __metadata__ first and tensors in insertion order, like the reference.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error&) {
    fail("{}: tensor names and metadata must be valid UTF-8", path);
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  TempFile out(path + ".tmp");
  out.write(len, sizeof len);
  out.write(text.data(), text.size());
  for (const auto& e : entries_) out.write(e.data.data(), e.data.size());
  out.commit(path);
}

}  // namespace plumb
