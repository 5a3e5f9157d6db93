#pragma once
// Reading a whole small file (config.json, tokenizer.json, a text to score) from a path a user
// gave. Only regular files are read: a FIFO would block forever, /dev/zero never ends and a
// directory reads as an error that streams report as an empty file. The size is checked before
// anything is allocated.
#include <cstdint>
#include <string>

namespace plumb {

// Throws plumb::Error naming `path` when it cannot be opened, is not a regular file, or holds
// more than `max_bytes`. `what` says what the file is for ("config file", "text file").
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const char* what);

// Opens `path` read-only without blocking on a FIFO and refuses anything but a regular file;
// returns the descriptor (the caller closes it) and sets `size`.
int open_regular_file(const std::string& path, std::uint64_t& size, const char* what);

}  // namespace plumb
