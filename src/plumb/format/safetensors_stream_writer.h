#pragma once
// Streaming safetensors writer: every tensor's name, dtype and shape is declared up front, so the
// header (and with it each tensor's offset) is written first and the data follows tensor by
// tensor, in as many pieces as the caller likes. Memory is one small write buffer, whatever the
// file size; this is what `plumb convert` uses to write checkpoints larger than RAM.
// (SafetensorsWriter, by contrast, holds every tensor's bytes until write().)
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/format/dtype.h"

namespace plumb {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;  // dtype size x numel; plumb::Error on a negative or overflowing shape
};

// The file's first bytes: the 8-byte little-endian header length, then the JSON header
// (__metadata__ first, tensors laid out in `entries` order) padded with spaces so the data
// section starts 8-byte aligned, as the reference implementation writes it.
std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata, const std::string& label);

class SafetensorsStreamWriter {
 public:
  // Creates `path`.tmp and writes the header. Names must be unique and not "__metadata__".
  SafetensorsStreamWriter(std::string path, std::vector<SafetensorsEntry> entries,
                          std::map<std::string, std::string> metadata = {});
  ~SafetensorsStreamWriter();  // unless finish() succeeded, the partial `path`.tmp is removed
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // Starts the next declared tensor; `name` must be the next one in declaration order and the
  // previous tensor must be complete.
  void begin_tensor(std::string_view name);
  // Appends bytes of the current tensor; more than its declared size is an error.
  void write(std::span<const std::byte> bytes);
  // Every tensor complete: flush, fsync, rename `path`.tmp to `path`.
  void finish();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }  // header + data, known from the declaration

 private:
  void flush();
  void write_fd(const void* data, std::size_t n);
  void check_current_complete() const;

  std::string path_, tmp_path_;
  std::vector<SafetensorsEntry> entries_;
  int fd_ = -1;
  bool finished_ = false;
  uint64_t file_size_ = 0;
  std::ptrdiff_t current_ = -1;  // index of the tensor being written
  uint64_t current_written_ = 0;
  std::vector<std::byte> buffer_;  // coalesces the many small tensors (norms, biases)
  std::size_t buffered_ = 0;
};

}  // namespace plumb
