#pragma once
// Test helpers for safetensors checkpoints: temporary directories, raw file images, small valid
// checkpoints, and a corpus of broken inputs built at test time. Semantic cases (a missing model
// tensor, a wrong scale shape, a NaN scale) can reuse BadCase, write_shard and write_index.
#include <fmt/format.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "plumb/format/safetensors.h"

namespace plumb::test {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "plumb-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A raw file image: length prefix, `header` verbatim (no validation, no padding), then
// `data_bytes` zero bytes. This is how broken headers are made.
inline std::string safetensors_image(std::string_view header, std::size_t data_bytes) {
  return le64(header.size()) + std::string(header) + std::string(data_bytes, '\0');
}

// Deterministic, name-dependent bytes so a test can tell tensors apart after a round trip.
inline std::vector<std::byte> pattern_bytes(const std::string& name, std::size_t n) {
  std::size_t seed = std::hash<std::string>{}(name);
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((seed + i * 131) >> 3);
  return out;
}

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  std::size_t nbytes() const {
    std::size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

// Writes a valid safetensors file holding `specs`, each filled with pattern_bytes(name).
inline void write_shard(const fs::path& file, const std::vector<TensorSpec>& specs) {
  SafetensorsWriter w;
  for (const auto& s : specs) w.add(s.name, s.dtype, s.shape, pattern_bytes(s.name, s.nbytes()));
  w.write(file.string());
}

// Writes dir/model.safetensors.index.json mapping tensor name -> shard file name.
inline void write_index(const fs::path& dir, const std::map<std::string, std::string>& weight_map) {
  std::string entries;
  for (const auto& [name, shard] : weight_map)
    entries += fmt::format("{}\"{}\": \"{}\"", entries.empty() ? "" : ",\n    ", name, shard);
  write_file(dir / Checkpoint::kIndexName,
             fmt::format("{{\n  \"metadata\": {{\"total_size\": 0}},\n  \"weight_map\": {{\n    {}\n  }}\n}}\n", entries));
}

// One broken input. `build` writes it under an empty directory and returns the path to open;
// every string in `expect` must appear in the error message (file names, tensor names, and the
// expectation that was violated).
struct BadCase {
  std::string name;  // a valid gtest name
  std::function<fs::path(const fs::path& dir)> build;
  std::vector<std::string> expect;
};

// gtest prints the case by name instead of dumping its bytes.
inline void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

inline BadCase raw_case(std::string name, std::string image, std::vector<std::string> expect) {
  std::string file = name + ".safetensors";
  expect.insert(expect.begin(), file);
  return {std::move(name),
          [file, image](const fs::path& dir) {
            write_file(dir / file, image);
            return dir / file;
          },
          std::move(expect)};
}

inline BadCase header_case(std::string name, std::string header, std::size_t data_bytes,
                           std::vector<std::string> expect) {
  return raw_case(std::move(name), safetensors_image(header, data_bytes), std::move(expect));
}

// A sharded directory: `setup` writes shards and index into dir; the directory is opened.
inline BadCase dir_case(std::string name, std::function<void(const fs::path&)> setup, std::vector<std::string> expect) {
  return {std::move(name),
          [setup](const fs::path& dir) {
            setup(dir);
            return dir;
          },
          std::move(expect)};
}

// Format-level cases for one file: framing, JSON, and per-entry validation.
inline std::vector<BadCase> bad_file_corpus() {
  const std::string ok = R"("dtype":"F32","shape":[2,3],"data_offsets":[0,24])";
  return {
      raw_case("empty_file", "", {"truncated", "0 bytes", "8-byte header length"}),
      raw_case("shorter_than_8_bytes", std::string("\x10\0\0", 3), {"truncated", "3 bytes"}),
      raw_case("header_length_past_eof", le64(1000) + "{}", {"header length 1000", "past the end of the file (10 bytes)"}),
      raw_case("absurd_header_length", le64(1ull << 40) + "{}", {"header length 1099511627776 is absurd"}),
      header_case("truncated_data", "{\"w\":{" + ok + "}}", 16, {"'w'", "[0, 24] end past the data section (16 bytes)"}),
      header_case("invalid_json", R"({"w": {"dtype": "F32",)", 0, {"invalid JSON", "parse error at line 1, column"}),
      header_case("trailing_garbage", "{} x", 0, {"invalid JSON"}),
      header_case("number_out_of_range", R"({"w":{"dtype":"U8","shape":[1e999],"data_offsets":[0,0]}})", 0,
                  {"invalid JSON", "number overflow"}),
      header_case("header_not_object", "[1, 2, 3]", 0, {"header must be a JSON object, got [1,2,3]"}),
      header_case("entry_not_object", R"({"w": 5})", 0, {"'w'", "entry must be an object", "got 5"}),
      header_case("missing_field", R"({"w":{"dtype":"F32","shape":[2]}})", 8, {"'w'", "missing field 'data_offsets'"}),
      header_case("extra_field", "{\"w\":{" + ok + ",\"foo\":1}}", 24, {"'w'", "unexpected field 'foo'"}),
      header_case("unknown_dtype", R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,2]}})", 2,
                  {"'w'", "unknown dtype 'F4'", "expected one of", "BF16", "F8_E8M0"}),
      header_case("dtype_not_string", R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,2]}})", 2, {"'w'", "dtype must be a string"}),
      header_case("negative_shape", R"({"w":{"dtype":"F32","shape":[-2,4],"data_offsets":[0,32]}})", 32,
                  {"'w'", "non-negative integers", "[-2,4]"}),
      header_case("fractional_shape", R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, {"'w'", "non-negative integers"}),
      header_case("shape_not_array", R"({"w":{"dtype":"F32","shape":8,"data_offsets":[0,32]}})", 32, {"'w'", "shape must be an array"}),
      header_case("byte_size_mismatch", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24,
                  {"'w'", "byte size mismatch", "= 24 bytes", "got 20 bytes"}),
      header_case("begin_after_end", R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[16,8]}})", 24, {"'w'", "[16, 8]", "begin > end"}),
      header_case("offsets_past_data", R"({"w":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}})", 32,
                  {"'w'", "end past the data section (32 bytes)"}),
      header_case("offsets_not_a_pair", R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0]}})", 0,
                  {"'w'", "data_offsets must be [begin, end]"}),
      header_case("negative_offset", R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}})", 0, {"'w'", "data_offsets must be"}),
      header_case("overlapping_tensors",
                  R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                  24, {"'a'", "'b'", "overlaps"}),
      header_case("numel_overflow", R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0,
                  {"'w'", "overflows 64 bits"}),
      header_case("metadata_not_string", R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "'format'", "must be a string"}),
      header_case("metadata_not_object", R"({"__metadata__":[]})", 0, {"__metadata__", "must be an object"}),
      header_case("duplicate_tensor_in_header", "{\"w\":{" + ok + "},\"w\":{" + ok + "}}", 24, {"duplicate key 'w'"}),
      header_case("control_char_in_name", R"({"a\nb":{"dtype":"X","shape":[],"data_offsets":[0,0]}})", 0,
                  {"'a\\x0ab'", "unknown dtype 'X'"}),
  };
}

// Cases for sharded directories and the index cross-check.
inline std::vector<BadCase> bad_checkpoint_corpus() {
  const TensorSpec a{"a", DType::F32, {4}}, b{"b", DType::BF16, {2, 2}}, c{"c", DType::U8, {3}};
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  const std::string idx = Checkpoint::kIndexName;
  return {
      dir_case("missing_shard", [=](const fs::path& d) { write_shard(d / s1, {a}); write_index(d, {{"a", s1}, {"b", s2}}); },
               {idx, "shard '" + s2 + "'", "tensor 'b'", "does not exist"}),
      dir_case("indexed_tensor_absent_from_shard",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_index(d, {{"a", s1}, {"b", s1}}); },
               {idx, "tensor 'b'", s1, "does not contain it"}),
      dir_case("shard_tensor_not_in_index",
               [=](const fs::path& d) { write_shard(d / s1, {a, c}); write_index(d, {{"a", s1}}); },
               {idx, "tensor 'c'", s1, "not listed in the index"}),
      dir_case("tensor_in_other_shard_than_indexed",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_shard(d / s2, {b}); write_index(d, {{"a", s2}, {"b", s1}}); },
               {idx, "tensor 'a'", s1, "maps it to '" + s2 + "'"}),
      dir_case("duplicate_across_shards_indexed",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_shard(d / s2, {a, b}); write_index(d, {{"a", s1}, {"b", s2}}); },
               {"tensor 'a'", "appears in both", s1, s2}),
      dir_case("duplicate_across_shards_no_index",
               [=](const fs::path& d) { write_shard(d / "x1.safetensors", {a, b}); write_shard(d / "x2.safetensors", {a}); },
               {"tensor 'a'", "appears in both", "x1.safetensors", "x2.safetensors"}),
      dir_case("bad_shard_in_indexed_dir",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_file(d / s2, safetensors_image("{\"b\":", 0)); write_index(d, {{"a", s1}, {"b", s2}}); },
               {s2, "invalid JSON"}),
      dir_case("index_invalid_json", [=](const fs::path& d) { write_shard(d / s1, {a}); write_file(d / idx, "{\"weight_map\": {\"a\": "); },
               {idx, "invalid JSON"}),
      dir_case("index_without_weight_map", [=](const fs::path& d) { write_shard(d / s1, {a}); write_file(d / idx, R"({"metadata": {}})"); },
               {idx, "\"weight_map\" object"}),
      dir_case("index_weight_map_value_not_string",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_file(d / idx, R"({"weight_map": {"a": 1}})"); },
               {idx, "'a'", "shard file name string"}),
      dir_case("index_shard_outside_directory",
               [=](const fs::path& d) { write_shard(d / s1, {a}); write_index(d, {{"a", "../" + s1}}); },
               {idx, "'../" + s1 + "'", "file name inside the checkpoint directory"}),
      dir_case("index_empty_weight_map", [=](const fs::path& d) { write_file(d / idx, R"({"weight_map": {}})"); },
               {idx, "weight_map is empty"}),
      dir_case("empty_directory", [](const fs::path&) {}, {"no model.safetensors.index.json and no *.safetensors files"}),
      {"nonexistent_path", [](const fs::path& d) { return d / "nope"; }, {"nope", "no such file or directory"}},
  };
}

}  // namespace plumb::test
