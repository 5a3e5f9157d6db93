// Paged cache storage formats (backend/kv_row.h) on the CPU: the row codec against the release's
// quantization ops (quant_fp8 / quant_fp4, bitwise), lossless re-encoding of values already on
// the grid, and every paged reader (indexer_topk, sparse_attention, mla_attention) on an encoded
// pool bitwise equal to the same op on an f32 pool holding the values that format stores (at
// block sizes 1, 3 and 256, shuffled tables). That the format is really used is checked too: the
// fp8 / fp4 results differ from the f32 ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "op_cases.h"
#include "op_test_util.h"
#include "paged_util.h"
#include "plumb/backend/backend.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::KvRowFormat;
using backend::KvRowSpec;
using backend::Round;
using backend::Tensor;

using KvFormatOps = CpuOpTest<23>;

// Values spread over many binades, with zeros, tiny (subnormal-code) values and ties.
std::vector<float> spread(std::mt19937_64& rng, int64_t n) {
  std::vector<float> v = randn(rng, n);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 11 == 0) v[i] *= 1e-6f;
    if (i % 17 == 0) v[i] = 0.f;
    if (i % 29 == 0) v[i] *= 300.f;
  }
  return v;
}

std::vector<uint8_t> encode(const KvRowSpec& s, const float* x) {
  std::vector<uint8_t> row(static_cast<std::size_t>(backend::kv_row_words(s) * 4), 0xAB);
  backend::kv_encode_row(s, x, row.data());
  return row;
}

std::vector<float> decode(const KvRowSpec& s, const std::vector<uint8_t>& row) {
  std::vector<float> v(static_cast<std::size_t>(s.values));
  for (int64_t i = 0; i < s.values; ++i) v[i] = backend::kv_value(s, row.data(), i);
  return v;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << b[i];
      return;
    }
  }
}

// Decoding an encoded row gives the release's round trip exactly (quant_fp8 over the nope dims in
// blocks of 64 with bf16 rope dims; quant_fp4 in blocks of 32; bf16 rounding), and encoding the
// decoded row again gives the same values: values on the grid are stored without loss.
TEST_F(KvFormatOps, RowCodecIsTheReleaseRoundTripAndLosslessOnItsGrid) {
  struct Case {
    KvRowSpec spec;
    const char* what;
  };
  const std::vector<Case> cases = {{{KvRowFormat::FP8, 512, 64}, "fp8 V4-Flash entry"},
                                   {{KvRowFormat::FP8, 64, 16}, "fp8 tiny entry (partial block)"},
                                   {{KvRowFormat::FP8, 130, 0}, "fp8 without rope (V3 latent), partial block"},
                                   {{KvRowFormat::FP4, 128, 0}, "fp4 V4-Flash key"},
                                   {{KvRowFormat::FP4, 36, 0}, "fp4 partial block"},
                                   {{KvRowFormat::BF16, 77, 0}, "bf16"}};
  for (const Case& c : cases) {
    const int64_t rows = 9, n = c.spec.values, nope = n - c.spec.rope;
    const std::vector<float> x = spread(rng, rows * n);
    std::vector<float> want;
    if (c.spec.format == KvRowFormat::FP8) {
      want = host(*be, be->quant_fp8(upload(x, {rows, n}), nope, 64));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = nope; i < n; ++i) want[r * n + i] = cpu::round_bf16(x[r * n + i]);
    } else if (c.spec.format == KvRowFormat::FP4) {
      want = host(*be, be->quant_fp4(upload(x, {rows, n}), 32));
    } else {
      want = x;
      cpu::round_bf16(want.data(), static_cast<int64_t>(want.size()));
    }
    std::vector<float> got;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<uint8_t> bytes = encode(c.spec, x.data() + r * n);
      const std::vector<float> back = decode(c.spec, bytes);
      // (The bytes may differ: a block whose largest value rounded down to half the format's range
      // takes half the scale and twice the codes; the values are the same.)
      expect_bitwise(decode(c.spec, encode(c.spec, back.data())), back, std::string(c.what) + " re-encoded");
      got.insert(got.end(), back.begin(), back.end());
    }
    expect_bitwise(got, want, c.what);
  }
  EXPECT_EQ(backend::kv_row_words({KvRowFormat::FP8, 512, 64}) * 4, 584);  // 448 + 128 + 7, padded
  EXPECT_EQ(backend::kv_row_words({KvRowFormat::FP4, 128, 0}) * 4, 68);
}

// The encoded pool's readers see exactly stored_values: every op on it equals the op on an f32
// pool of those values, bitwise; and for fp8 / fp4 those differ from the raw values.
TEST_F(KvFormatOps, IndexerTopKReadsEncodedKeys) {
  const int64_t H = 4, di = 32, m = 4, K = 5;
  const backend::Batch b = make_batch({0, 37, 90}, {30, 1, 6});
  std::vector<std::vector<float>> keys;
  for (const auto& s : b.seqs) keys.push_back(randn(rng, ((s.start + s.len) / m + 1) * di));
  const std::vector<float> q = randn(rng, b.rows * H * di), w = randn(rng, b.rows * H);
  backend::IndexerParams p;
  p.ratio = m;
  p.top_k = K;
  p.relu_scale = 0.25f;
  for (const KvRowSpec& spec : key_formats())
    for (const int64_t per_block : {1, 3, 64}) {
      std::vector<std::vector<float>> stored;
      for (const auto& k : keys) stored.push_back(stored_values(k, di, spec));
      const Paged enc = paged(*be, keys, di, per_block, 5, spec), dense = paged(*be, stored, di, per_block, 0);
      const Tensor qt = upload(q, {b.rows, H, di}), wt = upload(w, {b.rows, H});
      const std::vector<int32_t> got = host_i32(*be, be->indexer_topk(qt, wt, b, enc.cache, enc.tables, p));
      EXPECT_EQ(got, host_i32(*be, be->indexer_topk(qt, wt, b, dense.cache, dense.tables, p)))
          << format_name(spec) << " blocks of " << per_block;
    }
}

TEST_F(KvFormatOps, SparseAttentionReadsEncodedEntries) {
  const int64_t H = 3, Dh = 64, rope = 16, W = 8, m = 4, K = 6;
  const backend::Batch b = make_batch({0, 40, 9}, {13, 1, 4});
  const OwnedWeight sink = f32_weight({H}, randn(rng, H));
  const WeightView sv = sink.view();
  std::vector<std::vector<float>> comp, rings;
  std::vector<int32_t> sel;
  for (const auto& s : b.seqs) {
    comp.push_back(spread(rng, ((s.start + s.len) / m + 1) * Dh));
    rings.push_back(randn(rng, W * Dh));
    for (int64_t i = 0; i < s.len; ++i) {
      const int64_t visible = (s.start + i + 1) / m;
      for (int64_t k = 0; k < K; ++k) sel.push_back(k < visible && k != 2 ? static_cast<int32_t>((k * 7 + i) % visible) : -1);
    }
  }
  const std::vector<float> q = randn(rng, b.rows * H * Dh), kv = randn(rng, b.rows * Dh);
  std::vector<Tensor> rt;
  for (const auto& r : rings) rt.push_back(upload(r, {W, Dh}));
  const Tensor st = be->from_host(sel.data(), {b.rows, K});
  for (const bool selected : {false, true})
    for (const int64_t prob_block : {0, 4}) {
      backend::AttentionParams p;
      p.window = W;
      p.ratio = m;
      p.sink = &sv;
      p.scale = 0.125f;
      p.bf16_probs = prob_block > 0;
      p.prob_block = prob_block;
      std::vector<float> f32_out;
      for (const KvRowSpec& spec : entry_formats(rope))
        for (const int64_t per_block : {1, 3, 256}) {
          std::vector<std::vector<float>> stored;
          for (const auto& c : comp) stored.push_back(stored_values(c, Dh, spec));
          const Paged enc = paged(*be, comp, Dh, per_block, 9, spec), dense = paged(*be, stored, Dh, per_block, 0);
          const Tensor qt = upload(q, {b.rows, H, Dh}), kvt = upload(kv, {b.rows, Dh});
          const Tensor* s = selected ? &st : nullptr;
          const std::vector<float> got = host(*be, be->sparse_attention(qt, kvt, b, rt, enc.cache, enc.tables, s, p));
          const std::string what = format_name(spec) + (selected ? " selected" : " all") + " blocks of " +
                                   std::to_string(per_block) + " prob_block " + std::to_string(prob_block);
          expect_bitwise(got, host(*be, be->sparse_attention(qt, kvt, b, rt, dense.cache, dense.tables, s, p)), what);
          if (spec.format == KvRowFormat::F32) f32_out = got;
          if (spec.format == KvRowFormat::FP8) {
            EXPECT_NE(got, f32_out) << what << ": the format was not used";
          }
        }
    }
}

TEST_F(KvFormatOps, MlaAttentionReadsEncodedLatents) {
  const int64_t H = 3, R = 40, P = 8;
  const backend::Batch b = make_batch({0, 20}, {9, 2});
  std::vector<std::vector<float>> lat, kpe;
  for (const auto& s : b.seqs) {
    lat.push_back(spread(rng, (s.start + s.len + 1) * R));
    kpe.push_back(randn(rng, (s.start + s.len + 1) * P));
  }
  const std::vector<float> ql = randn(rng, b.rows * H * R, 0.2f), qp = randn(rng, b.rows * H * P, 0.2f);
  for (const Round r : {Round::None, Round::BF16}) {
    std::vector<float> f32_out;
    for (const KvRowSpec& spec : entry_formats(0))
      for (const int64_t per_block : {1, 3, 256}) {
        std::vector<std::vector<float>> lat_s, kpe_s;
        for (const auto& c : lat) lat_s.push_back(stored_values(c, R, spec));
        for (const auto& c : kpe) kpe_s.push_back(stored_values(c, P, rope_key_format(spec)));
        const PagedMla enc = paged_mla(*be, lat, R, kpe, P, per_block, 3, spec);
        const PagedMla dense = paged_mla(*be, lat_s, R, kpe_s, P, per_block, 0);
        const Tensor qlt = upload(ql, {b.rows, H, R}), qpt = upload(qp, {b.rows, H, P});
        const backend::MlaParams p{0.3f, r};
        const std::vector<float> got = host(*be, be->mla_attention(qlt, qpt, b, enc.latent, enc.k_pe, enc.tables, p));
        const std::string what = format_name(spec) + " blocks of " + std::to_string(per_block);
        expect_bitwise(got, host(*be, be->mla_attention(qlt, qpt, b, dense.latent, dense.k_pe, dense.tables, p)), what);
        if (spec.format == KvRowFormat::F32) f32_out = got;
        if (spec.format == KvRowFormat::FP8) {
          EXPECT_NE(got, f32_out) << what << ": the format was not used";
        }
      }
  }
}

// --kv-bf16-recent: with N covering every position, fp8 storage plus the recent entries (this
// call's new ones and each sequence's ring of older ones, all bf16) reads exactly what bf16
// storage does; with a short N the result is neither fp8's nor bf16's (both sources are used).
TEST_F(KvFormatOps, SparseAttentionReadsRecentEntriesInBf16) {
  const int64_t H = 2, Dh = 64, rope = 16, W = 8, m = 4, K = 5;
  const backend::Batch b = make_batch({0, 41, 90}, {14, 1, 7});  // a prefill, a decode step, a chunk
  const OwnedWeight sink = f32_weight({H}, randn(rng, H));
  const WeightView sv = sink.view();
  std::vector<std::vector<float>> comp;
  std::vector<Tensor> rings;
  std::vector<int32_t> sel;
  for (const auto& s : b.seqs) {
    comp.push_back(spread(rng, (s.start + s.len) / m * Dh));
    rings.push_back(upload(randn(rng, W * Dh), {W, Dh}));
    for (int64_t i = 0; i < s.len; ++i) {
      const int64_t visible = (s.start + i + 1) / m;
      for (int64_t k = 0; k < K; ++k) sel.push_back(k < visible ? static_cast<int32_t>(visible - 1 - (k * 3) % visible) : -1);
    }
  }
  const KvRowSpec fp8{KvRowFormat::FP8, 0, rope}, bf16{KvRowFormat::BF16, 0, 0};
  const Tensor qt = upload(randn(rng, b.rows * H * Dh), {b.rows, H, Dh}), kvt = upload(randn(rng, b.rows * Dh), {b.rows, Dh});
  const Tensor st = be->from_host(sel.data(), {b.rows, K});
  for (const bool selected : {false, true}) {
    backend::AttentionParams p;
    p.window = W;
    p.ratio = m;
    p.sink = &sv;
    p.scale = 0.125f;
    const Tensor* s = selected ? &st : nullptr;
    auto run = [&](const KvRowSpec& spec, int64_t positions) {
      const Paged pool = paged(*be, comp, Dh, 3, 13, spec);
      if (positions == 0) return host(*be, be->sparse_attention(qt, kvt, b, rings, pool.cache, pool.tables, s, p));
      backend::RecentEntries r;
      r.positions = positions;
      const int64_t R = backend::kv_recent_ring_rows(positions, m);
      std::vector<Tensor> recent;
      std::vector<float> fresh;
      for (std::size_t i = 0; i < b.seqs.size(); ++i) {
        const std::vector<float> v = stored_values(comp[i], Dh, bf16);
        const int64_t first = b.seqs[i].start / m, n = static_cast<int64_t>(v.size()) / Dh;
        std::vector<float> ring(static_cast<std::size_t>(R * Dh), std::numeric_limits<float>::quiet_NaN());
        for (int64_t w = std::max<int64_t>(0, first - R); w < first; ++w)
          std::copy_n(v.begin() + w * Dh, Dh, ring.begin() + (w % R) * Dh);
        recent.push_back(upload(ring, {R, Dh}));
        r.fresh_row.push_back(static_cast<int64_t>(fresh.size()) / Dh);
        fresh.insert(fresh.end(), v.begin() + first * Dh, v.begin() + n * Dh);
      }
      r.rings = recent;
      r.fresh = upload(fresh, {static_cast<int64_t>(fresh.size()) / Dh, Dh});
      backend::AttentionParams pr = p;
      pr.recent = &r;
      return host(*be, be->sparse_attention(qt, kvt, b, rings, pool.cache, pool.tables, s, pr));
    };
    const std::vector<float> as_bf16 = run(bf16, 0), as_fp8 = run(fp8, 0);
    expect_bitwise(run(fp8, 1 << 20), as_bf16, selected ? "recent covers all, selected" : "recent covers all");
    const std::vector<float> short_recent = run(fp8, 2 * m + 1);
    EXPECT_NE(short_recent, as_bf16);
    EXPECT_NE(short_recent, as_fp8);
  }
}

// paged_write refuses a pool that does not match its format; readers refuse a wrong row length.
TEST_F(KvFormatOps, MismatchedPoolsAreRefused) {
  const std::vector<std::vector<int32_t>> ids = {{0}};
  const backend::BlockTables t = backend::make_block_tables(*be, ids);
  const std::vector<backend::CacheRun> runs = {{0, 1}};
  const Tensor src = upload(randn(rng, 64), {1, 64});
  // fp8 rows of 64 values with 16 rope dims: 48 codes + 32 rope bytes + 1 scale = 81 bytes, 21 words.
  backend::PagedCache f32_words{be->full(backend::ElemType::F32, {4, 21}, 0.f), 4, {KvRowFormat::FP8, 64, 16}};
  EXPECT_THROW(be->paged_write(f32_words, t, src, runs), Error);  // an encoded format in an f32 tensor
  backend::PagedCache short_rows{be->full(backend::ElemType::I32, {4, 10}, 0.f), 4, {KvRowFormat::FP8, 64, 16}};
  EXPECT_THROW(be->paged_write(short_rows, t, src, runs), Error);  // 21 words needed
  backend::PagedCache odd_fp4{be->full(backend::ElemType::I32, {4, 10}, 0.f), 4, {KvRowFormat::FP4, 63, 0}};
  EXPECT_THROW(be->paged_write(odd_fp4, t, upload(randn(rng, 63), {1, 63}), runs), Error);
  backend::PagedCache ok{be->full(backend::ElemType::I32, {4, 21}, 0.f), 4, {KvRowFormat::FP8, 64, 16}};
  EXPECT_NO_THROW(be->paged_write(ok, t, src, runs));
  EXPECT_THROW(be->paged_write(ok, t, upload(randn(rng, 32), {1, 32}), runs), Error);  // 32 values for rows of 64
}

// copy_row_runs copies whole runs of any element type and refuses overlapping destinations.
TEST_F(KvFormatOps, CopyRowRuns) {
  std::vector<int32_t> words(40 * 3);
  std::iota(words.begin(), words.end(), 1000);
  Tensor t = be->from_host(words.data(), {40, 3});
  be->copy_row_runs(t, std::vector<int64_t>{0, 10}, std::vector<int64_t>{20, 30}, 5);
  std::vector<int32_t> want = words;
  std::copy_n(words.begin(), 15, want.begin() + 60);
  std::copy_n(words.begin() + 30, 15, want.begin() + 90);
  EXPECT_EQ(host_i32(*be, t), want);
  EXPECT_THROW(be->copy_row_runs(t, std::vector<int64_t>{0, 10}, std::vector<int64_t>{20, 22}, 5), Error);
  EXPECT_THROW(be->copy_row_runs(t, std::vector<int64_t>{0}, std::vector<int64_t>{3}, 5), Error);
  EXPECT_THROW(be->copy_row_runs(t, std::vector<int64_t>{0}, std::vector<int64_t>{38}, 5), Error);
}

}  // namespace
}  // namespace plumb::test
