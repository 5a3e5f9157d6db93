// Parity of the op checks (backend/op_checks.h): a table of bad calls, one per condition an op
// checks, each with the exact message every backend must refuse it with (written out here, not
// taken from the code under test). The CPU backend runs the table everywhere; the GPU backend runs
// it where a GPU is present (GpuOps skips otherwise).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Batch;
using backend::ElemType;
using backend::NormMath;

struct BadCall {
  std::string message;  // the whole plumb::Error text
  std::function<void(Backend&)> call;
};

Tensor f(Backend& be, Shape s) { return be.full(ElemType::F32, std::move(s), 0.5f); }
Tensor i(Backend& be, Shape s, int32_t value = 0) {
  return be.full(ElemType::I32, std::move(s), static_cast<float>(value));
}
// One sequence of `len` tokens at `row` of a batch of `rows` rows, from position `start`.
Batch batch(int64_t row, int64_t len, int64_t start, int64_t rows) { return Batch{{{row, len, start}}, rows}; }

// The weights the bad calls point at (kept at stable addresses), and the calls.
class BadCalls {
 public:
  BadCalls() {
    add_memory_and_elementwise();
    add_linear_rope_quant();
    add_hc();
    add_compress();
    add_indexer();
    add_sparse_attention();
    add_window_update();
    add_mla();
    add_paged_write();
    add_route();
    add_moe();
  }
  const std::vector<BadCall>& calls() const { return calls_; }

 private:
  const WeightView* keep(OwnedWeight w, const char* name) {
    w.name = name;
    owned_.push_back(std::move(w));
    views_.push_back(owned_.back().view());
    return &views_.back();
  }
  const WeightView* f32w(Shape s, const char* name) { return keep(f32_weight(s, randn(rng_, backend::element_count(s))), name); }
  void add(std::string message, std::function<void(Backend&)> call) {
    calls_.push_back({std::move(message), std::move(call)});
  }

  void add_memory_and_elementwise() {
    add("copy_rows: row sizes differ ([2, 3] vs [2, 4])", [](Backend& be) {
      Tensor d = f(be, {2, 3});
      be.copy_rows(d, 0, f(be, {2, 4}), 0, 1);
    });
    add("copy_rows: element types differ (destination f32, source i32)", [](Backend& be) {
      Tensor d = f(be, {2, 3});
      be.copy_rows(d, 0, i(be, {2, 3}), 0, 1);
    });
    add("copy_rows: rows [1, +2) of [2, 3] into [0, +2) of [4, 3] out of range", [](Backend& be) {
      Tensor d = f(be, {4, 3});
      be.copy_rows(d, 0, f(be, {2, 3}), 1, 2);
    });
    const WeightView* table = f32w({10, 4}, "table");
    add("token id 10 at position 1 is outside the vocabulary [0, 10)", [=](Backend& be) {
      const int32_t ids[] = {3, 10};
      be.embed(*table, be.from_host(ids, {2}));
    });
    add("token id 10 at position 1 is outside the vocabulary [0, 10)", [=](Backend& be) {
      const int32_t ids[] = {3, 10};
      be.embed(*table, be.from_host(ids, {2}), ids);  // checked on the host copy
    });
    add("embed: 1 host token ids for 2 ids", [=](Backend& be) {
      const int32_t ids[] = {3, 4};
      be.embed(*table, be.from_host(ids, {2}), std::span<const int32_t>(ids, 1));
    });
    add("repeat_rows: the number of copies must not be negative, got -1",
        [](Backend& be) { be.repeat_rows(f(be, {2, 3}), -1); });
    const WeightView *v3 = f32w({3}, "v3"), *v4 = f32w({4}, "v4");
    add("rms_norm: weight 'v3' has 3 values, input last dim is 4",
        [=](Backend& be) { be.rms_norm(f(be, {2, 4}), v3, 1e-6f, NormMath::F32, Round::None); });
    add("rms_norm: bf16-step math is only defined without a weight",
        [=](Backend& be) { be.rms_norm(f(be, {2, 4}), v4, 1e-6f, NormMath::BF16Steps, Round::BF16); });
    add("add: shapes [2, 3] and [3, 2] differ", [](Backend& be) { be.add(f(be, {2, 3}), f(be, {3, 2}), Round::None); });
    add("columns: [2, 5) is not inside the 4 columns of [3, 4]", [](Backend& be) { be.columns(f(be, {3, 4}), 2, 3); });
  }

  void add_linear_rope_quant() {
    const WeightView *v4 = f32w({4}, "v4"), *w64 = f32w({6, 4}, "w64");
    OwnedWeight odd = fp4_weight(4, 6, randn(rng_, 24));
    odd.shape = {4, 5};  // an odd column count (refused before the data is read)
    const WeightView* fp4 = keep(std::move(odd), "fp4");
    add("linear: weight 'v4' must be 2-D", [=](Backend& be) { be.linear(f(be, {2, 4}), *v4, {}); });
    add("linear: weight 'w64' rows 6 do not split into 4 groups",
        [=](Backend& be) { be.linear(f(be, {2, 16}), *w64, {4}); });
    add("linear: input [2, 5] has last dim 5, weight 'w64' [6, 4] with 2 group(s) needs 8",
        [=](Backend& be) { be.linear(f(be, {2, 5}), *w64, {2}); });
    add("linear: FP4 weight 'fp4' has an odd number of columns (5): its rows are not byte-aligned",
        [=](Backend& be) { be.linear(f(be, {2, 5}), *fp4, {}); });
    add("rope: 3 frequencies need 6 dims, vectors have 4",
        [](Backend& be) { be.rope(f(be, {2, 4}), i(be, {2}), f(be, {3}), false, Round::None); });
    add("rope: 3 positions for 2 rows",
        [](Backend& be) { be.rope(f(be, {2, 4}), i(be, {3}), f(be, {2}), false, Round::None); });
    add("quant_fp8: 5 columns of vectors of 4", [](Backend& be) { be.quant_fp8(f(be, {2, 4}), 5, 2); });
    add("quant_fp8: quantization block size must be positive, got 0",
        [](Backend& be) { be.quant_fp8(f(be, {2, 4}), 4, 0); });
    add("quant_fp4: quantization block size must be positive, got -32",
        [](Backend& be) { be.quant_fp4(f(be, {2, 4}), -32); });
    add("hadamard: length 6 is not a power of two", [](Backend& be) { be.hadamard(f(be, {2, 6}), Round::None); });
  }

  void add_hc() {  // streams [2, 2, 4]: hc = 2, D = 4; a site mixes (2 + hc) * hc = 8 values of 8
    const WeightView *fn = f32w({24, 8}, "fn"), *base = f32w({8}, "base"), *scale = f32w({3}, "scale");
    const backend::HcParams site{fn, base, scale, 2, 1e-6f, 1e-6f};
    add("hc_pre: streams must have rank 3, got [2, 8]", [=](Backend& be) { be.hc_pre(f(be, {2, 8}), site, Round::None); });
    add("hc_pre: missing mHC parameters", [=](Backend& be) {
      backend::HcParams p = site;
      p.base = nullptr;
      be.hc_pre(f(be, {2, 2, 4}), p, Round::None);
    });
    add("hc_pre: 'fn' must be [8, 8] with 8 base and 3 scale values",
        [=](Backend& be) { be.hc_pre(f(be, {2, 2, 4}), site, Round::None); });
    add("hc_head: 'fn' must be [2, 8] with 2 base and 1 scale values",
        [=](Backend& be) { be.hc_head(f(be, {2, 2, 4}), site, Round::None); });
    add("hc_post: streams must have rank 3, got [2, 8]", [](Backend& be) {
      be.hc_post(f(be, {2, 4}), f(be, {2, 8}), f(be, {2, 2}), f(be, {2, 2, 2}), Round::None);
    });
    add("hc_post: shapes out [2, 4] streams [2, 2, 4] post [2, 3] comb [2, 2, 2] disagree", [](Backend& be) {
      be.hc_post(f(be, {2, 4}), f(be, {2, 2, 4}), f(be, {2, 3}), f(be, {2, 2, 2}), Round::None);
    });
  }

  void add_compress() {  // ratio 4 overlaps (c = 2): head_dim 2 gives C = 4, state [8, 4], ape [4, 4]
    const WeightView *ape = f32w({4, 4}, "ape"), *big = f32w({10, 4}, "big");
    const backend::CompressorParams p{4, 2, ape};
    auto run = [=](Backend& be, Shape kv, const Batch& b, int n_states, Shape state,
                   const backend::CompressorParams& q) {
      std::vector<backend::CompressorState> s;
      for (int k = 0; k < n_states; ++k) s.push_back({f(be, state), f(be, state)});
      be.compress(f(be, kv), f(be, {b.rows, 4}), b, s, q, Round::None);
    };
    add("compress: needs a positive ratio and the ape bias",
        [=](Backend& be) { run(be, {2, 4}, batch(0, 2, 0, 2), 1, {8, 4}, {0, 2, ape}); });
    add("compress: kv [2, 3] / score [2, 4] must be [2, 4]",
        [=](Backend& be) { run(be, {2, 3}, batch(0, 2, 0, 2), 1, {8, 4}, p); });
    add("compress: 2 states for 1 sequences", [=](Backend& be) { run(be, {2, 4}, batch(0, 2, 0, 2), 2, {8, 4}, p); });
    add("compress: ape 'big' must be [4, 4]",
        [=](Backend& be) { run(be, {2, 4}, batch(0, 2, 0, 2), 1, {8, 4}, {4, 2, big}); });
    add("compress: sequence 0 (rows [1, +2) at position 0) lies outside the 2 rows of the batch",
        [=](Backend& be) { run(be, {2, 4}, batch(1, 2, 0, 2), 1, {8, 4}, p); });
    add("compress: state of sequence 0 (kv [4, 4], score [4, 4]) must be [8, 4]",
        [=](Backend& be) { run(be, {2, 4}, batch(0, 2, 0, 2), 1, {4, 4}, p); });
  }

  void add_indexer() {  // q [2, 2, 4]; two tokens from position 6 see (6 + 2) / 4 = 2 entries,
                        // one block of a pool of 2 blocks of 2 keys
    using Ids = std::vector<std::vector<int32_t>>;
    auto run = [](Backend& be, Shape q, Shape w, const Batch& b, Shape pool, Ids ids, int64_t ratio, int64_t top_k) {
      const backend::PagedCache k{f(be, pool), 2, {}};
      be.indexer_topk(f(be, q), f(be, w), b, k, backend::make_block_tables(be, ids), {ratio, top_k, 1.f, Round::None});
    };
    const Batch b = batch(0, 2, 6, 2);
    const Ids one{{1}};
    add("indexer_topk: q must have rank 3, got [2, 8]", [=](Backend& be) { run(be, {2, 8}, {2, 2}, b, {4, 4}, one, 4, 2); });
    add("indexer_topk: weights [2, 3] for q [2, 2, 4]",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 3}, b, {4, 4}, one, 4, 2); });
    add("indexer_topk: block tables for 2 sequences (2 ids of width 1) given for 1 sequences",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {4, 4}, {{1}, {0}}, 4, 2); });
    add("indexer_topk: ratio must be positive, got 0",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {4, 4}, one, 0, 2); });
    add("indexer_topk: top_k must not be negative, got -1",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {4, 4}, one, 4, -1); });
    add("indexer_topk: sequence 0 (rows [1, +2) at position 6) lies outside the 2 rows of the batch",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, batch(1, 2, 6, 2), {4, 4}, one, 4, 2); });
    add("indexer_topk: the key pool [3, 4] must be f32 [blocks * 2, 4]",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {3, 4}, one, 4, 2); });
    add("indexer_topk: the key entries 0..1 of sequence 0 need 1 blocks of 2; its block table has 0",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {4, 4}, {{}}, 4, 2); });
    add("indexer_topk: block 0 of sequence 0's table is 2, outside the key pool of 2 blocks",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2}, b, {4, 4}, {{2}}, 4, 2); });
  }

  void add_sparse_attention() {  // q [2, 2, 4], window 3, ratio 4: from position 6, 2 compressed
                                 // entries, one block of a pool of 2 blocks of 2 entries
    const WeightView *sink = f32w({2}, "sink"), *sink4 = f32w({4}, "sink4");
    struct Call {
      Shape q{2, 2, 4}, kv{2, 4};
      Batch b = batch(0, 2, 6, 2);
      std::vector<Shape> rings{{3, 4}};
      Shape comp{4, 4};
      std::vector<std::vector<int32_t>> ids{{1}};
      Shape selected;  // empty: no selection
      std::vector<int32_t> selection;
      std::vector<int64_t> prefill;
    };
    auto run = [=](Backend& be, const Call& c, const WeightView* s) {
      std::vector<Tensor> r;
      for (const Shape& x : c.rings) r.push_back(f(be, x));
      const backend::PagedCache k{f(be, c.comp), 2, {}};
      Tensor sel;
      if (!c.selection.empty()) sel = be.from_host(c.selection.data(), c.selected);
      else if (!c.selected.empty()) sel = i(be, c.selected, -1);
      backend::AttentionParams p{3, 4, s, 0.5f, false, 0, Round::None};
      p.prefill = c.prefill;
      be.sparse_attention(f(be, c.q), f(be, c.kv), c.b, r, k, backend::make_block_tables(be, c.ids),
                          sel.defined() ? &sel : nullptr, p);
    };
    auto with = [](auto edit) {
      Call c;
      edit(c);
      return c;
    };
    auto bad = [&](std::string message, Call c, const WeightView* s) {
      add(std::move(message), [=](Backend& be) { run(be, c, s); });
    };
    bad("sparse_attention: q must have rank 3, got [2, 8]", with([](Call& c) { c.q = {2, 8}; }), sink);
    bad("sparse_attention: kv [2, 5] for q [2, 2, 4]", with([](Call& c) { c.kv = {2, 5}; }), sink);
    bad("sparse_attention: 2 window rings for 1 sequences", with([](Call& c) { c.rings = {{3, 4}, {3, 4}}; }), sink);
    bad("sparse_attention: block tables for 2 sequences (2 ids of width 1) given for 1 sequences",
        with([](Call& c) { c.ids = {{1}, {0}}; }), sink);
    bad("sparse_attention: sink must hold 2 values", Call{}, sink4);
    bad("sparse_attention: selection [6] must be [2, K]", with([](Call& c) { c.selected = {6}; }), sink);
    bad("sparse_attention: selection [3, 2] for 2 queries", with([](Call& c) { c.selected = {3, 2}; }), sink);
    bad("sparse_attention: sequence 0 (rows [1, +2) at position 6) lies outside the 2 rows of the batch",
        with([](Call& c) { c.b = batch(1, 2, 6, 2); }), sink);
    bad("sparse_attention: 2 prefill lengths for 1 sequences", with([](Call& c) { c.prefill = {4, 4}; }), sink);
    bad("sparse_attention: a prefill of -1 positions", with([](Call& c) { c.prefill = {-1}; }), sink);
    bad("sparse_attention: window ring [2, 4] must be [3, 4]", with([](Call& c) { c.rings = {{2, 4}}; }), sink);
    bad("sparse_attention: the compressed pool [3, 4] must be f32 [blocks * 2, 4]", with([](Call& c) { c.comp = {3, 4}; }),
        sink);
    bad("sparse_attention: the compressed entries 0..1 of sequence 0 need 1 blocks of 2; its block table has 0",
        with([](Call& c) { c.ids = {{}}; }), sink);
    bad("sparse_attention: block 0 of sequence 0's table is -3, outside the compressed pool of 2 blocks",
        with([](Call& c) { c.ids = {{-3}}; }), sink);
    // One token at position 3 sees (3 + 1) / 4 = 1 entry; it selects entry 1.
    bad("sparse_attention: query at position 3 selects entry 1 of 1 visible", with([](Call& c) {
          c.q = {1, 2, 4}, c.kv = {1, 4}, c.b = batch(0, 1, 3, 1), c.comp = {2, 4}, c.ids = {{0}};
          c.selected = {1, 1}, c.selection = {1};
        }),
        sink);
  }

  void add_window_update() {
    auto run = [](Backend& be, std::vector<Shape> rings, const Batch& b) {
      std::vector<Tensor> r;
      for (const Shape& s : rings) r.push_back(f(be, s));
      be.window_update(r, f(be, {2, 4}), b);
    };
    const Batch b = batch(0, 2, 6, 2);
    add("window_update: 2 rings for 1 sequences", [=](Backend& be) { run(be, {{3, 4}, {3, 4}}, b); });
    add("window_update: sequence 0 (rows [1, +2) at position 6) lies outside the 2 rows of the batch",
        [=](Backend& be) { run(be, {{3, 4}}, batch(1, 2, 6, 2)); });
    add("window_update: window ring [0, 4] has no rows", [=](Backend& be) { run(be, {{0, 4}}, b); });
    add("window_update: window ring [3, 5] does not hold rows of kv [2, 4]",
        [=](Backend& be) { run(be, {{3, 5}}, b); });
  }

  void add_mla() {  // q_lat [2, 2, 4], q_pe [2, 2, 3]; two tokens from position 6 need 8 cached rows:
                    // two blocks of 4 positions, from pools of 2 blocks
    using Ids = std::vector<std::vector<int32_t>>;
    auto run = [](Backend& be, Shape ql, Shape qp, const Batch& b, Shape lat, Shape kpe, Ids ids) {
      const backend::PagedCache l{f(be, lat), 4, {}}, k{f(be, kpe), 4, {}};
      be.mla_attention(f(be, ql), f(be, qp), b, l, k, backend::make_block_tables(be, ids), {0.5f, Round::None});
    };
    const Batch b = batch(0, 2, 6, 2);
    const Ids two{{1, 0}};
    add("mla_attention: q_lat must have rank 3, got [2, 8]",
        [=](Backend& be) { run(be, {2, 8}, {2, 2, 3}, b, {8, 4}, {8, 3}, two); });
    add("mla_attention: q_pe must have rank 3, got [2, 6]",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 6}, b, {8, 4}, {8, 3}, two); });
    add("mla_attention: q_pe [2, 1, 3] for q_lat [2, 2, 4]",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 1, 3}, b, {8, 4}, {8, 3}, two); });
    add("mla_attention: block tables for 2 sequences (4 ids of width 2) given for 1 sequences",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, b, {8, 4}, {8, 3}, {{1, 0}, {0, 1}}); });
    add("mla_attention: sequence 0 (rows [1, +2) at position 6) lies outside the 2 rows of the batch",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, batch(1, 2, 6, 2), {8, 4}, {8, 3}, two); });
    add("mla_attention: the latent pool [6, 4] must be f32 [blocks * 4, 4]",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, b, {6, 4}, {8, 3}, two); });
    add("mla_attention: the rope key cache holds rows of 4 values, 3 expected",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, b, {8, 4}, {8, 4}, two); });
    add("mla_attention: the latent entries 0..7 of sequence 0 need 2 blocks of 4; its block table has 1",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, b, {8, 4}, {8, 3}, {{1}}); });
    add("mla_attention: block 1 of sequence 0's table is 2, outside the latent pool of 2 blocks",
        [=](Backend& be) { run(be, {2, 2, 4}, {2, 2, 3}, b, {8, 4}, {8, 3}, {{1, 2}}); });
  }

  void add_paged_write() {  // a pool of 2 blocks of 2 rows of 4
    using Ids = std::vector<std::vector<int32_t>>;
    auto run = [](Backend& be, Shape pool, Ids ids, Shape src, std::vector<backend::CacheRun> runs) {
      backend::PagedCache c{f(be, pool), 2, {}};
      be.paged_write(c, backend::make_block_tables(be, ids), f(be, src), runs);
    };
    add("paged_write: block tables for 1 sequences (1 ids of width 1) given for 2 sequences",
        [=](Backend& be) { run(be, {4, 4}, {{0}}, {2, 4}, {{0, 1}, {0, 1}}); });
    add("paged_write: sequence 0 writes 1 entries from entry -1",
        [=](Backend& be) { run(be, {4, 4}, {{0}}, {1, 4}, {{-1, 1}}); });
    add("paged_write: the destination entries 0..2 of sequence 0 need 2 blocks of 2; its block table has 1",
        [=](Backend& be) { run(be, {4, 4}, {{0}}, {2, 4}, {{1, 2}}); });
    add("paged_write: block 0 of sequence 0's table is 5, outside the destination pool of 2 blocks",
        [=](Backend& be) { run(be, {4, 4}, {{5}}, {2, 4}, {{0, 2}}); });
    add("paged_write: the destination cache holds rows of 4 values, 5 expected",
        [=](Backend& be) { run(be, {4, 4}, {{0}}, {2, 5}, {{0, 2}}); });
    add("paged_write: the runs take 2 rows, the source [3, 4] holds 3",
        [=](Backend& be) { run(be, {4, 4}, {{0}}, {3, 4}, {{0, 2}}); });
  }

  void add_route() {  // x [2, 6], 4 experts, top 2
    const WeightView *gate = f32w({4, 6}, "gate"), *v3 = f32w({3}, "v3"), *table = f32w({10, 4}, "table");
    OwnedWeight t2e = f32_weight({3, 2}, randn(rng_, 6));
    t2e.dtype = DType::I32;
    const int32_t rows[] = {0, 1, 2, 3, 1, 9};  // token 2 names expert 9 of 4
    std::memcpy(t2e.data.data(), rows, sizeof rows);
    const WeightView* hash = keep(std::move(t2e), "tid2eid");
    auto params = [=](auto edit) {
      backend::RouteParams p;
      p.gate = gate;
      p.top_k = 2;
      edit(p);
      return p;
    };
    auto run = [](Backend& be, Shape x, std::vector<int32_t> ids, const backend::RouteParams& p) {
      be.route(f(be, x), be.from_host(ids.data(), {static_cast<int64_t>(ids.size())}), p);
    };
    const std::vector<int32_t> ids = {0, 1};
    auto bad = [&](std::string message, Shape x, std::vector<int32_t> id, const backend::RouteParams& p) {
      add(std::move(message), [=](Backend& be) { run(be, x, id, p); });
    };
    bad("route: no gate weight", {2, 6}, ids, params([](auto& p) { p.gate = nullptr; }));
    bad("route: gate 'gate' is [4, 6], input [2, 5]", {2, 5}, ids, params([](auto&) {}));
    bad("route: top_k 5 with 4 experts", {2, 6}, ids, params([](auto& p) { p.top_k = 5; }));
    bad("route: 4 experts in 3 groups keeping 1 cannot give top-2", {2, 6}, ids,
        params([](auto& p) { p.n_group = 3; }));
    bad("route: bias 'v3' has 3 values for 4 experts", {2, 6}, ids, params([=](auto& p) { p.bias = v3; }));
    bad("route: 3 token ids for 2 rows", {2, 6}, {0, 1, 2}, params([=](auto& p) { p.tid2eid = hash; }));
    bad("route: tid2eid 'tid2eid' has 2 experts per token, top_k is 3", {2, 6}, ids,
        params([=](auto& p) { p.tid2eid = hash, p.top_k = 3; }));
    bad("route: tid2eid 'table' must hold I32 or I64 expert ids, not F32", {2, 6}, ids,
        params([=](auto& p) { p.tid2eid = table; }));
    bad("route: token id 3 outside tid2eid", {2, 6}, {0, 3}, params([=](auto& p) { p.tid2eid = hash; }));
    static const int32_t one_id[] = {0};
    bad("route: 1 host token ids for 2 rows", {2, 6}, ids,
        params([=](auto& p) { p.tid2eid = hash, p.host_ids = one_id; }));
    static const int32_t far_ids[] = {0, 3};
    bad("route: token id 3 outside tid2eid", {2, 6}, {0, 3},
        params([=](auto& p) { p.tid2eid = hash, p.host_ids = far_ids; }));
    bad("route: tid2eid[2] names expert 9 of 4", {2, 6}, {0, 2}, params([=](auto& p) { p.tid2eid = hash; }));
  }

  void add_moe() {  // x [2, 6], SwiGLU experts of I = 5; every row routes to expert 1
    const WeightView *w1 = f32w({5, 6}, "e.w1"), *w2 = f32w({6, 5}, "e.w2"), *w3 = f32w({5, 6}, "e.w3");
    const backend::SwiGluWeights good{w1, w2, w3};
    auto run = [=](Backend& be, Shape experts_shape, std::vector<backend::SwiGluWeights> experts,
                   const backend::SwiGluWeights& shared) {
      const backend::Routing r{i(be, experts_shape, 1), f(be, {2, 1})};
      be.moe(f(be, {2, 6}), r, experts, shared, {});
    };
    add("moe: routing experts [2] and weights [2, 1] do not fit input [2, 6]",
        [=](Backend& be) { run(be, {2}, {good, good}, good); });
    add("moe: shared expert has missing weights",
        [=](Backend& be) { run(be, {2, 1}, {good, good}, {w1, nullptr, w3}); });
    add("moe: shared expert weights 'e.w2' [6, 5], 'e.w3' [5, 6], 'e.w1' [5, 6] do not form a SwiGLU over 6 inputs",
        [=](Backend& be) { run(be, {2, 1}, {good, good}, {w2, w1, w3}); });
    // expert 0 lacks weights but no row selects it: only expert 1 is checked
    add("moe: routed expert 1 has missing weights",
        [=](Backend& be) { run(be, {2, 1}, {{}, {w1, w2, nullptr}}, good); });
  }

  std::mt19937_64 rng_{7};
  std::deque<OwnedWeight> owned_;
  std::deque<WeightView> views_;
  std::vector<BadCall> calls_;
};

void expect_refusals(Backend& be) {
  const BadCalls bad;
  for (const BadCall& c : bad.calls()) {
    try {
      c.call(be);
      // A device backend may report what only its kernel can see (an invisible selected entry)
      // at the next synchronization instead of in the call.
      be.synchronize();
      ADD_FAILURE() << be.name() << " accepted a bad call; expected: " << c.message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), c.message) << "on the " << be.name() << " backend";
    }
  }
}

TEST(OpChecks, CpuRefusesEveryBadCall) {
  const auto be = backend::make_cpu_backend(1);
  expect_refusals(*be);
}

TEST_F(GpuOps, RefusesTheBadCallsTheCpuRefuses) { expect_refusals(*gpu); }

}  // namespace
}  // namespace plumb::test
