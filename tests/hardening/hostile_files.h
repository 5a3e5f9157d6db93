#pragma once
// Building blocks for the bad-input tests: raw .npy files with any header text, and poking bytes
// into a copied shard.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace plumb::test {

// The bytes of a .npy file of format `major` (1, 2 or 3) whose header is `header`, padded with
// spaces and a '\n' to a multiple of 64 as NumPy does, followed by `data`.
inline std::string npy_bytes(const std::string& header, const std::string& data, int major = 1) {
  std::string h = header;
  const std::size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::string file = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  const uint32_t n = static_cast<uint32_t>(h.size());
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) file.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return file + h + data;
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Overwrites bytes of an existing file at `offset` (the file keeps its size).
inline void poke(const std::filesystem::path& p, uint64_t offset, const std::string& bytes) {
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace plumb::test
