#pragma once
// Safetensors reader: mmap, zero-copy views, single file or sharded (model.safetensors.index.json).
// Opening parses and validates headers only; no weight byte is read until a view is touched.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/format/dtype.h"
#include "plumb/util/mapped_file.h"

namespace plumb {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::size_t shard = 0;        // index into Checkpoint::shards()
  uint64_t data_begin = 0;      // absolute byte offset of the tensor data in its shard file
  uint64_t nbytes = 0;

  int64_t numel() const;
  std::string shape_str() const;  // "[129280, 4096]"
};

// A tensor's bytes, valid while the Checkpoint lives.
struct TensorView {
  const TensorInfo* info = nullptr;
  std::span<const std::byte> bytes;
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(bytes.data()); }
};

// One parsed safetensors file. Validation (each failure is a plumb::Error naming the file and,
// where relevant, the tensor): header length fits the file, header is a JSON object, every entry
// has a known dtype, a non-negative shape and data_offsets [begin, end] with begin <= end inside
// the data section, end - begin == numel * dtype size, no two tensors overlap, no duplicate keys,
// __metadata__ maps strings to strings. Deliberately lenient where the reference is strict but no
// byte would be misread: gaps between tensors and bytes after the last one are accepted.
class SafetensorsFile {
 public:
  // `shard_index` is stored in every TensorInfo::shard (the file's place in a Checkpoint).
  explicit SafetensorsFile(const std::string& path, std::size_t shard_index = 0);
  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by data offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::span<const std::byte> bytes(const TensorInfo& t) const;
  std::size_t file_size() const { return file_.size(); }

 private:
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses a safetensors header (the JSON after the 8-byte length) against a data section of
// `data_size` bytes that starts at absolute offset `data_start`. Exposed for the fuzzer and tests.
std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, uint64_t data_start,
                                                 uint64_t data_size, const std::string& file_label,
                                                 std::map<std::string, std::string>* metadata);

// A header longer than this is rejected as not-a-safetensors-file (real ones are well under 1 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses a whole file image (length prefix, header, data section) already in memory; touches only
// the first 8 + header-length bytes. Offsets in the result are relative to the image start.
// `metadata` may be null. This is what SafetensorsFile runs on its mapping.
std::vector<TensorInfo> parse_safetensors_image(std::span<const std::byte> image, const std::string& file_label,
                                                std::map<std::string, std::string>* metadata);

// A checkpoint: a directory with model.safetensors.index.json (sharded; the index file's own path
// works too), a directory with *.safetensors files (all opened, sorted by name), or a single
// .safetensors file. The index's weight_map is cross-checked both ways: a shard it names must
// exist, every tensor it maps must be in that shard, and every tensor in a shard must be mapped to
// it. Files the index does not name are ignored. A tensor name in two shards is an error.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  const std::string& root() const { return root_; }  // directory holding the shards
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  std::vector<const TensorInfo*> tensors() const;  // sorted by name
  std::size_t tensor_count() const { return by_name_.size(); }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const TensorInfo& at(const std::string& name) const;    // plumb::Error naming it if absent
  TensorView view(const std::string& name) const;
  TensorView view(const TensorInfo& t) const;
  uint64_t total_bytes() const;

  static constexpr const char* kIndexName = "model.safetensors.index.json";

  // Puts `bytes` (numel(shape) * dtype size of them, held by the checkpoint from now on) in the
  // place of tensor `name`, which must exist: a tensor-parallel piece made whole again
  // (convert/shard.h open_tp_rank). Its TensorInfo::shard is kOwnedShard.
  void replace(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes);
  static constexpr std::size_t kOwnedShard = static_cast<std::size_t>(-1);

 private:
  void add_shard(const std::string& file);  // opens it and registers its tensors (no duplicates)
  void open_indexed(const std::string& index_path);
  void check_against_index(const std::map<std::string, std::string>& weight_map,
                           const std::string& index_path) const;

  std::string root_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorInfo*> by_name_;
  struct OwnedTensor {
    TensorInfo info;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, std::unique_ptr<OwnedTensor>> owned_;  // replace()d tensors
};

// Writes one safetensors file: tensors laid out in insertion order, header padded with spaces so
// the data section starts 8-byte aligned (as the reference implementation does). The file is
// written to `path.tmp` and renamed, so a failed write never leaves a half file at `path`.
class SafetensorsWriter {
 public:
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> data);
  void set_metadata(std::string key, std::string value);
  void write(const std::string& path) const;  // throws plumb::Error on I/O failure

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<Entry> entries_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace plumb
