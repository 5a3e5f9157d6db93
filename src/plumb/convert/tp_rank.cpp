#include "plumb/convert/tp_rank.h"

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "plumb/convert/shard.h"
#include "plumb/util/error.h"

namespace plumb::convert {
namespace {

// The N pieces of a tensor split along `dim`, concatenated back along it.
std::vector<std::byte> concatenate(std::span<const std::span<const std::byte>> pieces, const TensorInfo& piece, int dim) {
  std::size_t outer = 1, seg = dtype_size(piece.dtype);
  for (int d = 0; d < dim; ++d) outer *= static_cast<std::size_t>(piece.shape[d]);
  for (std::size_t d = static_cast<std::size_t>(dim); d < piece.shape.size(); ++d)
    seg *= static_cast<std::size_t>(piece.shape[d]);
  std::vector<std::byte> out(outer * seg * pieces.size());
  std::byte* at = out.data();
  for (std::size_t i = 0; i < outer; ++i)
    for (const auto& p : pieces) {
      std::memcpy(at, p.data() + i * seg, seg);
      at += seg;
    }
  return out;
}

}  // namespace

Checkpoint open_tp_rank(const TpShardSet& set, int64_t rank, const ModelConfig& cfg) {
  const TpShardSummary s = check_tp_shards(set, cfg);
  if (!s.problems.empty()) fail("{}: the tensor-parallel split does not check: {}", set.files.front(), s.problems.front());
  if (rank < 0 || rank >= set.tp) fail("rank {} is not one of the {} ranks of the split", rank, set.tp);
  Checkpoint ckpt = Checkpoint::open(set.files[static_cast<std::size_t>(rank)]);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::map<std::string, const TensorInfo*>> by_name(static_cast<std::size_t>(set.tp));
  for (int64_t r = 0; r < set.tp; ++r) {
    files.push_back(std::make_unique<SafetensorsFile>(set.files[static_cast<std::size_t>(r)], r));
    for (const TensorInfo& t : files.back()->tensors()) by_name[static_cast<std::size_t>(r)][t.name] = &t;
  }
  for (const TensorInfo* t : ckpt.tensors()) {
    const SplitRule rule = split_rule(cfg.arch, t->name);
    if (rule.kind != SplitRule::Split) continue;
    std::vector<std::span<const std::byte>> pieces;
    for (int64_t r = 0; r < set.tp; ++r)
      pieces.push_back(files[static_cast<std::size_t>(r)]->bytes(*by_name[static_cast<std::size_t>(r)].at(t->name)));
    std::vector<int64_t> whole = t->shape;
    whole[static_cast<std::size_t>(rule.dim)] *= set.tp;
    const std::string name = t->name;
    const DType dtype = t->dtype;
    ckpt.replace(name, dtype, std::move(whole), concatenate(pieces, *t, rule.dim));
  }
  return ckpt;
}

}  // namespace plumb::convert
