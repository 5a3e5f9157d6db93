#pragma once
// Shared by the DeepSeek-V3 model tests: a fixture bound to a bare ForwardV3 on the CPU backend,
// float32 .npy goldens, and the ragged, chunked schedule whose logits must equal one prefill.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/format/npy.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/forward_v3.h"
#include "plumb/model/numerics.h"
#include "plumb/model/weights_v3.h"

namespace plumb::test {

// A V3 checkpoint directory loaded through the bare forward (the tests read its logits directly).
struct LoadedV3 {
  ModelConfig cfg;
  Checkpoint ckpt;
  v3::ModelWeights w;
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(2);
  std::unique_ptr<v3::ForwardV3> fwd;
  explicit LoadedV3(const std::filesystem::path& dir, Numerics n = Numerics::Reference)
      : cfg(load_model_config(dir.string())), ckpt(Checkpoint::open(dir.string())), w(v3::bind_weights(ckpt, cfg)) {
    fwd = std::make_unique<v3::ForwardV3>(*be, cfg, w, n);
  }
  std::vector<float> run(std::span<const SequenceStep> in) {
    const backend::Tensor t = fwd->forward(in);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    be->to_host(t, out.data());
    return out;
  }
  // The logits of every position of `ids` in one prefill of a fresh sequence.
  std::vector<float> prefill(std::span<const TokenId> ids) {
    v3::SequenceState s = fwd->new_sequence();
    const SequenceStep in{&s, ids};
    return run({&in, 1});
  }
};

inline std::vector<float> npy_f32(const std::filesystem::path& p) {
  const NpyArray a = read_npy(p.string());
  EXPECT_EQ(a.dtype, DType::F32) << p;
  std::vector<float> v(static_cast<std::size_t>(a.numel()));
  std::memcpy(v.data(), a.data.data(), v.size() * sizeof(float));
  return v;
}

// Two sequences fed as one ragged batch in six uneven chunks each (b's rows first in every call):
// the logits each sequence got, and how many of its ids were fed (the chunks cover 64 and 23).
struct RaggedChunked {
  std::vector<float> a, b;
  std::size_t fed_a = 0, fed_b = 0;
};
inline RaggedChunked ragged_chunked(LoadedV3& m, std::span<const TokenId> a, std::span<const TokenId> b) {
  const int64_t V = m.cfg.vocab_size;
  v3::SequenceState sa = m.fwd->new_sequence(), sb = m.fwd->new_sequence();
  RaggedChunked r;
  const std::size_t chunks_a[] = {5, 1, 17, 1, 1, 39}, chunks_b[] = {1, 9, 1, 4, 7, 1};
  for (int c = 0; c < 6; ++c) {
    const std::span<const TokenId> ta = a.subspan(r.fed_a, chunks_a[c]), tb = b.subspan(r.fed_b, chunks_b[c]);
    const SequenceStep in[2] = {{&sb, tb}, {&sa, ta}};
    const std::vector<float> lg = m.run(in);
    r.b.insert(r.b.end(), lg.begin(), lg.begin() + static_cast<int64_t>(tb.size()) * V);
    r.a.insert(r.a.end(), lg.begin() + static_cast<int64_t>(tb.size()) * V, lg.end());
    r.fed_a += chunks_a[c];
    r.fed_b += chunks_b[c];
  }
  return r;
}

}  // namespace plumb::test
