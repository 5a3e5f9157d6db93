#pragma once
// A minimal blocking HTTP/1.1 client over a loopback socket for the server tests, independent
// of the server's own code: it writes requests by hand and decodes chunked bodies itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace plumb::test {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

// ThreadSanitizer runs the engine 5-15x slower: 64 streams on two busy cores can wait longer
// than 30 s for their first token without anything being wrong.
#if defined(__SANITIZE_THREAD__)
inline constexpr long kReadTimeoutSeconds = 180;
#else
inline constexpr long kReadTimeoutSeconds = 30;
#endif

class Socket {
 public:
  explicit Socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{kReadTimeoutSeconds, 0};  // a test that would hang fails instead
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect() failed");
  }
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send_all(const std::string& bytes) {
    for (std::size_t at = 0; at < bytes.size();) {
      ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early (413): the response is still readable
      at += static_cast<std::size_t>(n);
    }
  }
  // Reads until `pattern` is in the data read so far (or the peer closes / times out).
  bool read_until(const std::string& pattern) {
    while (data_.find(pattern) == std::string::npos)
      if (!read_some()) return false;
    return true;
  }
  void read_to_end() {
    while (read_some()) {
    }
  }
  const std::string& data() const { return data_; }

 private:
  bool read_some() {
    char buf[8192];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    data_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int fd_;
  std::string data_;
};

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::vector<std::string>& headers = {}) {
  std::string out = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) out += h + "\r\n";
  if (!body.empty() || method == "POST") out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return out + "\r\n" + body;
}

inline std::string dechunk(const std::string& raw) {
  std::string out;
  for (std::size_t at = 0;;) {
    std::size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos) throw std::runtime_error("chunked body: no chunk size line");
    std::size_t size = std::stoul(raw.substr(at, eol - at), nullptr, 16);
    if (size == 0) return out;
    out += raw.substr(eol + 2, size);
    if (raw.substr(eol + 2 + size, 2) != "\r\n") throw std::runtime_error("chunked body: chunk not followed by CRLF");
    at = eol + 2 + size + 2;
  }
}

inline HttpResponse parse_response(const std::string& raw) {
  HttpResponse r;
  std::size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) throw std::runtime_error("not an HTTP response: " + raw.substr(0, 80));
  r.status = std::stoi(raw.substr(9, 3));
  for (std::size_t at = raw.find("\r\n") + 2; at < end;) {
    std::size_t eol = raw.find("\r\n", at);
    std::string line = raw.substr(at, eol - at);
    std::size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    at = eol + 2;
  }
  std::string body = raw.substr(end + 4);
  r.body = r.headers["transfer-encoding"] == "chunked" ? dechunk(body) : body;
  return r;
}

inline HttpResponse http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         const std::vector<std::string>& headers = {}) {
  Socket s(port);
  s.send_all(request_text(method, path, body, headers));
  s.read_to_end();
  return parse_response(s.data());
}

// The "data: ..." payloads of an SSE body; throws if the framing is not exactly
// "data: PAYLOAD\n\n" frames back to back.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < body.size();) {
    if (body.compare(at, 6, "data: ") != 0) throw std::runtime_error("SSE frame does not start with 'data: ': " + body.substr(at, 40));
    std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) throw std::runtime_error("SSE frame not ended by a blank line");
    std::string payload = body.substr(at + 6, end - at - 6);
    if (payload.find('\n') != std::string::npos) throw std::runtime_error("SSE payload spans lines");
    out.push_back(payload);
    at = end + 2;
  }
  return out;
}

}  // namespace plumb::test
