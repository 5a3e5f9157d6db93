#pragma once
// Storage formats of a paged cache's rows (issue #15; MODEL-SPEC 5), written once for the host
// and the device: the CPU's paged_write and the GPU's encode kernel call kv_encode_row, and every
// reader (indexer_topk, sparse_attention, mla_attention on both backends) decodes the values it
// uses with kv_value, so the two backends store the same bytes and read the same values.
//   f32   the values as they are (the pool is an f32 tensor [rows, values])
//   bf16  each value rounded to nearest even bf16: 2 bytes
//   fp8   the release's KV entry: the first values - rope ("nope") dims as e4m3 with one ue8m0
//         scale per 64 (a trailing partial block on its own), the last `rope` dims bf16.
//         Bytes: [nope e4m3 codes][rope bf16][ceil(nope / 64) scales]
//   fp4   the release's indexer key: e2m1 pairs (low nibble = even index) with one ue8m0 scale
//         per 32 values. Bytes: [values / 2 packed][ceil(values / 32) scales]
// An encoded row is padded to whole 4-byte words (the pool is an i32 tensor [rows, words]): a
// V4-Flash fp8 entry takes 584 B (583 + 1), an fp4 key 68 B.
// The encode rule is the release's quantization (gpu_numerics.h: ue8m0_scale_for, the e4m3/e2m1
// RNE encoders with saturation, x / s clamped to the format's range), the one quant_fp8 /
// quant_fp4 round-trip with: a row already on the grid (the faithful profile's entries and keys)
// is stored without loss.
#include <cstdint>

#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::backend {

enum class KvRowFormat : int32_t { F32 = 0, BF16 = 1, FP8 = 2, FP4 = 3 };

constexpr int64_t kKvFp8Block = 64, kKvFp4Block = 32;

// One cache's rows: the format, the values per row and (fp8) how many trailing values are rope
// dims kept in bf16.
struct KvRowSpec {
  KvRowFormat format = KvRowFormat::F32;
  int64_t values = 0;
  int64_t rope = 0;
};

PLUMB_HD int64_t kv_row_bytes(const KvRowSpec& s) {
  switch (s.format) {
    case KvRowFormat::F32: return s.values * 4;
    case KvRowFormat::BF16: return s.values * 2;
    case KvRowFormat::FP8: {
      const int64_t nope = s.values - s.rope;
      return nope + s.rope * 2 + (nope + kKvFp8Block - 1) / kKvFp8Block;
    }
    case KvRowFormat::FP4: return s.values / 2 + (s.values + kKvFp4Block - 1) / kKvFp4Block;
  }
  return 0;
}

// 4-byte words one stored row takes (the pool tensor's row size).
PLUMB_HD int64_t kv_row_words(const KvRowSpec& s) { return (kv_row_bytes(s) + 3) / 4; }

PLUMB_HD uint16_t kv_bf16_bits(float x) { return static_cast<uint16_t>(gpu::f32_bits(gpu::round_bf16(x)) >> 16); }

PLUMB_HD void kv_store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFFu);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// The ue8m0 scale of values x[0..n) for a format with largest magnitude qmax.
PLUMB_HD uint8_t kv_block_scale(const float* x, int64_t n, float qmax, float min_amax) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.f ? -x[i] : x[i];
    amax = a > amax ? a : amax;
  }
  return gpu::ue8m0_scale_for(amax, qmax, min_amax);
}

// The scale blocks of an fp8 (its nope values) or fp4 row: values a block, the format's largest
// magnitude, its amax floor; the encoders below and the GPU's value-parallel one use it.
struct KvScaleRule {
  int64_t block;
  float qmax, min_amax;
};
PLUMB_HD KvScaleRule kv_scale_rule(KvRowFormat f) {
  return f == KvRowFormat::FP8 ? KvScaleRule{kKvFp8Block, gpu::kFp8Max, gpu::kFp8MinAmax}
                               : KvScaleRule{kKvFp4Block, gpu::kFp4Max, gpu::fp4_min_amax()};
}

// One fp8 (nope) block of n <= 64 values: codes into `codes`, the scale byte returned.
PLUMB_HD uint8_t kv_encode_fp8_block(const float* x, int64_t n, uint8_t* codes) {
  const KvScaleRule r = kv_scale_rule(KvRowFormat::FP8);
  const uint8_t sb = kv_block_scale(x, n, r.qmax, r.min_amax);
  const float s = gpu::ue8m0_to_f32(sb);
  for (int64_t i = 0; i < n; ++i) codes[i] = gpu::fp8_code(x[i], s);
  return sb;
}

// One fp4 block of n <= 32 values starting at an even index: nibbles or-ed into `packed`
// (zeroed by the caller), the scale byte returned.
PLUMB_HD uint8_t kv_encode_fp4_block(const float* x, int64_t n, uint8_t* packed) {
  const KvScaleRule r = kv_scale_rule(KvRowFormat::FP4);
  const uint8_t sb = kv_block_scale(x, n, r.qmax, r.min_amax);
  const float s = gpu::ue8m0_to_f32(sb);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t nib = gpu::fp4_code(x[i], s);
    packed[i / 2] = static_cast<uint8_t>(packed[i / 2] | ((i & 1) ? nib << 4 : nib));
  }
  return sb;
}

// Encodes block `b` of a row (the unit one GPU thread takes; the CPU loops over all of them):
// fp8: nope block b (b < ceil(nope / 64)) or rope value b - that count; fp4: block b of 32;
// bf16: value b. kv_row_units says how many there are. An fp4 row's bytes must be zero first.
PLUMB_HD int64_t kv_row_units(const KvRowSpec& s) {
  switch (s.format) {
    case KvRowFormat::F32:
    case KvRowFormat::BF16: return s.values;
    case KvRowFormat::FP8: return (s.values - s.rope + kKvFp8Block - 1) / kKvFp8Block + s.rope;
    case KvRowFormat::FP4: return (s.values + kKvFp4Block - 1) / kKvFp4Block;
  }
  return 0;
}

PLUMB_HD void kv_encode_unit(const KvRowSpec& s, const float* x, uint8_t* row, int64_t b) {
  switch (s.format) {
    case KvRowFormat::F32: {
      const uint32_t u = gpu::f32_bits(x[b]);
      for (int k = 0; k < 4; ++k) row[b * 4 + k] = static_cast<uint8_t>(u >> (8 * k));
      return;
    }
    case KvRowFormat::BF16: kv_store_u16(row + b * 2, kv_bf16_bits(x[b])); return;
    case KvRowFormat::FP8: {
      const int64_t nope = s.values - s.rope, blocks = (nope + kKvFp8Block - 1) / kKvFp8Block;
      if (b < blocks) {
        const int64_t i0 = b * kKvFp8Block, n = nope - i0 < kKvFp8Block ? nope - i0 : kKvFp8Block;
        row[nope + s.rope * 2 + b] = kv_encode_fp8_block(x + i0, n, row + i0);
      } else {
        const int64_t r = b - blocks;
        kv_store_u16(row + nope + r * 2, kv_bf16_bits(x[nope + r]));
      }
      return;
    }
    case KvRowFormat::FP4: {
      const int64_t i0 = b * kKvFp4Block, n = s.values - i0 < kKvFp4Block ? s.values - i0 : kKvFp4Block;
      row[s.values / 2 + b] = kv_encode_fp4_block(x + i0, n, row + i0 / 2);
      return;
    }
  }
}

// The whole row x[0..values) into row[0..kv_row_words * 4) (the padding zeroed).
PLUMB_HD void kv_encode_row(const KvRowSpec& s, const float* x, uint8_t* row) {
  const int64_t bytes = kv_row_words(s) * 4;
  for (int64_t i = 0; i < bytes; ++i) row[i] = 0;
  const int64_t units = kv_row_units(s);
  for (int64_t b = 0; b < units; ++b) kv_encode_unit(s, x, row, b);
}

// Value i of an encoded row (exact: a code times its power-of-two scale).
PLUMB_HD float kv_value(const KvRowSpec& s, const uint8_t* row, int64_t i) {
  switch (s.format) {
    case KvRowFormat::F32: return gpu::load_f32(row + i * 4);
    case KvRowFormat::BF16: return gpu::bf16_to_f32(static_cast<uint16_t>(row[i * 2] | (row[i * 2 + 1] << 8)));
    case KvRowFormat::FP8: {
      const int64_t nope = s.values - s.rope;
      if (i >= nope) {
        const uint8_t* p = row + nope + (i - nope) * 2;
        return gpu::bf16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
      }
      return gpu::e4m3_to_f32(row[i]) * gpu::ue8m0_to_f32(row[nope + s.rope * 2 + i / kKvFp8Block]);
    }
    case KvRowFormat::FP4: {
      const uint8_t byte = row[i / 2];
      return gpu::e2m1_to_f32(static_cast<uint8_t>((i & 1) ? byte >> 4 : byte & 0xFu)) *
             gpu::ue8m0_to_f32(row[s.values / 2 + i / kKvFp4Block]);
    }
  }
  return 0.f;
}

// --kv-bf16-recent (backend.h RecentEntries): the first entry of a cache with one entry per
// `ratio` positions that covers one of the last `positions` positions of a query at t.
PLUMB_HD int64_t kv_recent_first(int64_t t, int64_t positions, int64_t ratio) {
  const int64_t p = t + 1 - positions;
  return p <= 0 ? 0 : p / ratio;
}
// Ring rows that hold every entry such a query can need from before its call.
PLUMB_HD int64_t kv_recent_ring_rows(int64_t positions, int64_t ratio) { return (positions + ratio - 1) / ratio + 1; }

// A paged cache's storage formats for a model (KvPool::set_storage): the compressed entries
// (V4) or latents (V3) and the indexer keys.
struct KvStorage {
  KvRowFormat entries = KvRowFormat::F32;
  KvRowFormat index_keys = KvRowFormat::F32;
  int64_t bf16_recent = 0;  // V4 compressed entries of the last N positions read in bf16 (0: none)
};

}  // namespace plumb::backend
