// Checkpoint: the set of safetensors shards making up a model, opened lazily (headers only).
#include <algorithm>
#include <filesystem>
#include <map>

#include "plumb/format/json_util.h"
#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

// The real V4 index is ~6 MB; this only stops a wrong file from being slurped.
constexpr std::size_t kMaxIndexBytes = 512u << 20;

std::string filename_of(const std::string& path) { return fs::path(path).filename().string(); }

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks (the Hugging Face cache uses them)
}

std::vector<std::string> list_safetensors(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".safetensors" && is_regular(it->path())) files.push_back(it->path().string());
  if (ec) fail("{}: cannot list directory: {}", dir, ec.message());
  if (files.empty()) fail("{}: no {} and no *.safetensors files in this directory", dir, Checkpoint::kIndexName);
  std::sort(files.begin(), files.end());
  return files;
}

// A shard named by the index must be a plain file name inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::string& tensor, const std::string& index_path) {
  if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
      shard.find('\0') != std::string::npos)
    fail("{}: weight_map maps tensor {} to {}; expected a file name inside the checkpoint directory",
         index_path, quote(tensor), quote(shard));
}

// weight_map: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  MappedFile file(index_path);
  if (file.size() > kMaxIndexBytes)
    fail("{}: {} bytes is too large for an index file (limit {})", index_path, file.size(), kMaxIndexBytes);
  auto text = std::string_view(reinterpret_cast<const char*>(file.data()), file.size());
  auto root = parse_json_strict(text, index_path);
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    fail("{}: expected a JSON object with a \"weight_map\" object (tensor name -> shard file)", index_path);
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : root["weight_map"].items()) {
    if (!shard.is_string())
      fail("{}: weight_map entry {} must be a shard file name string, got {}", index_path, quote(name),
           json_brief(shard));
    check_shard_name(shard.get_ref<const std::string&>(), name, index_path);
    weight_map.emplace(name, shard.get<std::string>());
  }
  if (weight_map.empty()) fail("{}: weight_map is empty; a checkpoint needs at least one tensor", index_path);
  return weight_map;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail("{}: no such file or directory", path);
  Checkpoint c;
  if (fs::is_directory(status)) {
    c.root_ = path;
    auto index = fs::path(path) / kIndexName;
    if (fs::exists(index)) {
      c.open_indexed(index.string());
    } else {
      for (const auto& f : list_safetensors(path)) c.add_shard(f);
    }
    return c;
  }
  auto parent = fs::path(path).parent_path();
  c.root_ = parent.empty() ? "." : parent.string();
  if (path.ends_with(".index.json"))
    c.open_indexed(path);
  else
    c.add_shard(path);
  return c;
}

void Checkpoint::add_shard(const std::string& file) {
  shards_.push_back(std::make_unique<SafetensorsFile>(file, shards_.size()));
  for (const auto& t : shards_.back()->tensors()) {
    auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted) {
      // model{rank}-mp{N}.safetensors (plumb convert shard, DeepSeek's convert.py) repeat every
      // replicated tensor in each rank's file: say so instead of only reporting the duplicate.
      const std::string name = filename_of(file);
      const bool tp = name.starts_with("model") && name.find("-mp") != std::string::npos;
      fail("tensor {} appears in both {} and {}{}", quote(t.name), shards_[it->second->shard]->path(), file,
           tp ? " (this is a tensor-parallel split: plumb loads unsharded checkpoints; `plumb inspect` checks the split)" : "");
    }
  }
}

void Checkpoint::open_indexed(const std::string& index_path) {
  auto weight_map = read_weight_map(index_path);
  std::map<std::string, std::string> one_tensor_of;  // shard file -> a tensor mapped to it
  for (const auto& [name, shard] : weight_map) one_tensor_of.emplace(shard, name);
  for (const auto& [shard, tensor] : one_tensor_of)
    if (std::error_code ec; !fs::exists(fs::path(root_) / shard, ec))  // one that is not a regular file: MappedFile says so
      fail("{}: shard {} (holding tensor {} per the index) does not exist in {}", index_path, quote(shard),
           quote(tensor), root_);
  for (const auto& [shard, _] : one_tensor_of) add_shard((fs::path(root_) / shard).string());
  check_against_index(weight_map, index_path);
}

// Every tensor in a shard must be indexed to that shard, and every indexed tensor must exist.
void Checkpoint::check_against_index(const std::map<std::string, std::string>& weight_map,
                                     const std::string& index_path) const {
  for (const auto& [name, t] : by_name_) {
    const auto& file = shards_[t->shard]->path();
    auto it = weight_map.find(name);
    if (it == weight_map.end())
      fail("{}: tensor {} is in {} but is not listed in the index's weight_map", index_path, quote(name), file);
    if (it->second != filename_of(file))
      fail("{}: tensor {} is in {} but the index maps it to {}", index_path, quote(name), file, quote(it->second));
  }
  for (const auto& [name, shard] : weight_map)
    if (!by_name_.contains(name))
      fail("{}: tensor {} is mapped to shard {} but that shard does not contain it", index_path, quote(name),
           quote(shard));
}

std::vector<const TensorInfo*> Checkpoint::tensors() const {
  std::vector<const TensorInfo*> out;
  out.reserve(by_name_.size());
  for (const auto& [_, t] : by_name_) out.push_back(t);
  return out;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::at(const std::string& name) const {
  if (const auto* t = find(name)) return *t;
  fail("{}: checkpoint has no tensor {} ({} tensors in {} shard(s))", root_, quote(name), by_name_.size(),
       shards_.size());
}

TensorView Checkpoint::view(const std::string& name) const { return view(at(name)); }

TensorView Checkpoint::view(const TensorInfo& t) const {
  if (t.shard == kOwnedShard) {
    const auto it = owned_.find(t.name);
    if (it == owned_.end() || &it->second->info != &t) fail("{}: tensor {} is not one this checkpoint holds", root_, quote(t.name));
    return TensorView{&t, it->second->bytes};
  }
  if (t.shard >= shards_.size()) fail("{}: tensor {} names shard {} of {}", root_, quote(t.name), t.shard, shards_.size());
  return TensorView{&t, shards_[t.shard]->bytes(t)};
}

void Checkpoint::replace(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes) {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) fail("{}: cannot replace tensor {}: the checkpoint has none", root_, quote(name));
  auto t = std::make_unique<OwnedTensor>();
  t->info.name = name;
  t->info.dtype = dtype;
  t->info.shape = std::move(shape);
  t->info.shard = kOwnedShard;
  t->info.nbytes = bytes.size();
  const uint64_t want = static_cast<uint64_t>(t->info.numel()) * dtype_size(dtype);
  if (want != bytes.size())
    fail("{}: tensor {} {} of {} needs {} bytes, got {}", root_, quote(name), t->info.shape_str(), dtype_name(dtype),
         want, bytes.size());
  t->bytes = std::move(bytes);
  it->second = &t->info;
  owned_[name] = std::move(t);
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [_, t] : by_name_) total += t->nbytes;
  return total;
}

}  // namespace plumb
