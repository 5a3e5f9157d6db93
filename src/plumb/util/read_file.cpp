#include "plumb/util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, std::uint64_t& size, const char* what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat runs.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open {}: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot stat {}: {}", path, what, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: the {} is {}; plumb reads only regular files", path, what, kind_of(st.st_mode));
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const char* what) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, size, what);
  if (size > max_bytes) {
    ::close(fd);
    fail("{}: the {} is {}, more than the {} plumb reads", path, what, format_bytes(static_cast<double>(size)),
         format_bytes(static_cast<double>(max_bytes)));
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail("{}: reading the {} failed after {} of {} bytes: {}", path, what, done, text.size(),
           n == 0 ? "the file shrank" : std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return text;
}

}  // namespace plumb
