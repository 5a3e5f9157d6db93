#pragma once
// Read-only memory mapping of a whole file. Mapping reads nothing: pages are faulted in only
// when touched, so opening a 150 GB checkpoint costs a few syscalls.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace plumb {

class MappedFile {
 public:
  // Throws plumb::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const std::string& path() const { return path_; }
  std::size_t size() const { return size_; }
  const std::byte* data() const { return static_cast<const std::byte*>(base_); }
  std::span<const std::byte> bytes() const { return {data(), size_}; }

 private:
  std::string path_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace plumb
