// SafetensorsStreamWriter: header first, then tensor data in declared order, bounded memory.
#include "plumb/format/safetensors_stream_writer.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "plumb/format/json_util.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

// Large enough that the thousands of tiny tensors of a checkpoint cost few syscalls, small
// enough that many files open at once (one per tensor-parallel rank) stay cheap.
constexpr std::size_t kBufferBytes = 1u << 20;

}  // namespace

uint64_t SafetensorsEntry::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      fail("safetensors writer: tensor {}: invalid shape [{}]", quote(name), fmt::join(shape, ", "));
  return n;
}

std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata, const std::string& label) {
  // ordered_json keeps __metadata__ first and tensors in the given order, like the reference.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& e : entries) {
    if (e.name == "__metadata__") fail("{}: '__metadata__' is reserved and cannot name a tensor", label);
    if (!seen.insert(e.name).second) fail("{}: tensor {} declared twice", label, quote(e.name));
    const uint64_t n = e.nbytes();
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error&) {
    fail("{}: tensor names and metadata must be valid UTF-8", label);
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::vector<SafetensorsEntry> entries,
                                                 std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), entries_(std::move(entries)) {
  const std::string head = encode_safetensors_header(entries_, metadata, path_);
  file_size_ = head.size();
  for (const auto& e : entries_) file_size_ += e.nbytes();
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", tmp_path_, std::strerror(errno));
  buffer_.resize(kBufferBytes);
  write_fd(head.data(), head.size());
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_path_.c_str());
}

void SafetensorsStreamWriter::check_current_complete() const {
  if (current_ < 0) return;
  const auto& e = entries_[static_cast<std::size_t>(current_)];
  if (current_written_ != e.nbytes())
    fail("{}: tensor {} got {} of its {} bytes", path_, quote(e.name), current_written_, e.nbytes());
}

void SafetensorsStreamWriter::begin_tensor(std::string_view name) {
  check_current_complete();
  const auto next = static_cast<std::size_t>(current_ + 1);
  if (next >= entries_.size())
    fail("{}: tensor {} written after all {} declared tensors", path_, quote(name), entries_.size());
  if (entries_[next].name != name)
    fail("{}: tensor {} written where {} was declared next", path_, quote(name), quote(entries_[next].name));
  current_ = static_cast<std::ptrdiff_t>(next);
  current_written_ = 0;
}

void SafetensorsStreamWriter::write(std::span<const std::byte> bytes) {
  if (current_ < 0) fail("{}: data written before begin_tensor", path_);
  const auto& e = entries_[static_cast<std::size_t>(current_)];
  if (bytes.size() > e.nbytes() - current_written_)
    fail("{}: tensor {} would get {} bytes, declared {}", path_, quote(e.name), current_written_ + bytes.size(),
         e.nbytes());
  current_written_ += bytes.size();
  if (buffered_ + bytes.size() > buffer_.size()) flush();
  if (bytes.size() >= buffer_.size()) {  // large pieces go straight to the file
    write_fd(bytes.data(), bytes.size());
    return;
  }
  std::memcpy(buffer_.data() + buffered_, bytes.data(), bytes.size());
  buffered_ += bytes.size();
}

void SafetensorsStreamWriter::flush() {
  write_fd(buffer_.data(), buffered_);
  buffered_ = 0;
}

void SafetensorsStreamWriter::write_fd(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("{}: write failed: {}", tmp_path_, std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void SafetensorsStreamWriter::finish() {
  check_current_complete();
  if (static_cast<std::size_t>(current_ + 1) != entries_.size())
    fail("{}: finished after {} of {} declared tensors", path_, current_ + 1, entries_.size());
  flush();
  // fsync before the rename: after a crash the file is either absent or complete.
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", tmp_path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("{}: close failed: {}", tmp_path_, std::strerror(errno));
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("{}: cannot rename {} into place: {}", path_, tmp_path_, std::strerror(errno));
  finished_ = true;
}

}  // namespace plumb
