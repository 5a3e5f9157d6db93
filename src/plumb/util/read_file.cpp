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

std::ifstream open_regular_stream(const std::string& path, const char* what) {
  std::uint64_t size = 0;
  ::close(open_regular_file(path, size, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open {}", path, what);
  return in;
}

bool read_line(std::istream& in, std::string& line, const std::string& where, std::size_t max_bytes) {
  line.clear();
  const std::istream::sentry ok(in, true);
  if (!ok) return false;
  std::streambuf& buf = *in.rdbuf();
  bool any = false;  // a last line without a newline is still a line
  for (;;) {
    const int c = buf.sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(any ? std::ios::eofbit : std::ios::eofbit | std::ios::failbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (line.size() == max_bytes) fail("{}: a line longer than {} bytes, the most plumb reads", where, max_bytes);
    line.push_back(static_cast<char>(c));
  }
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
