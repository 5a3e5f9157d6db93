#include "plumb/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, size, "file");  // a FIFO or device is refused, never waited on
  size_ = static_cast<std::size_t>(size);
  if (size_ > 0) {
    base_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base_ == MAP_FAILED) {
      int err = errno;
      base_ = nullptr;
      ::close(fd);
      fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(err));
    }
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (base_) ::munmap(base_, size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(base_, size_);
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace plumb
