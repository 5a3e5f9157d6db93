#pragma once
// Reading a whole small file (config.json, tokenizer.json, a text to score) from a path a user
// gave. Only regular files are read: a FIFO would block forever, /dev/zero never ends and a
// directory reads as an error that streams report as an empty file. The size is checked before
// anything is allocated.
#include <cstdint>
#include <fstream>
#include <istream>
#include <string>

namespace plumb {

// Throws plumb::Error naming `path` when it cannot be opened, is not a regular file, or holds
// more than `max_bytes`. `what` says what the file is for ("config file", "text file").
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const char* what);

// Opens `path` read-only without blocking on a FIFO and refuses anything but a regular file;
// returns the descriptor (the caller closes it) and sets `size`.
int open_regular_file(const std::string& path, std::uint64_t& size, const char* what);

// The same check, then the file as a stream for reading line by line (JSON-lines inputs).
std::ifstream open_regular_stream(const std::string& path, const char* what);

// The longest line plumb reads from a JSON-lines input (a prompt of a million tokens is ~4 MB).
constexpr std::size_t kMaxLineBytes = std::size_t{64} << 20;

// std::getline with a bound, for inputs that may never end a line (/dev/zero as stdin, a file
// with no newline): false at the end of the input; throws plumb::Error naming `where` (say
// "in.jsonl:3") when the line holds more than `max_bytes` bytes.
bool read_line(std::istream& in, std::string& line, const std::string& where, std::size_t max_bytes = kMaxLineBytes);

}  // namespace plumb
