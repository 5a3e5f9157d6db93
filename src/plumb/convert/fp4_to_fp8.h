#pragma once
// Lossless re-encoding of FP4 e2m1 weights with 1x32 ue8m0 scales (V4 routed experts) into FP8
// e4m3 with 128x128 ue8m0 scales (the V4-Base expert format, as OFF convert.py --expert-dtype fp8
// produces it). "Lossless" means every dequantized value is bit-identical.
//
// Why it is exact. An FP4 value is m x 2^(s-127) with |m| in {0.5, 1, 1.5, 2, 3, 4, 6}: at most two
// significant bits, a multiple of 0.5, and m >= 2^-1 with floor(log2 m) in [-1, 2]. For one
// 128x128 block we pick the scale byte t so the block's largest magnitude lands in e4m3's top
// binade: t = clamp(max(floor(log2 m) + s) - 8, 0, 254). Each element becomes q = m x 2^(s-t).
//  * Top: floor(log2 q) <= 8 and the mantissa is at most 1.5, so q <= 384 < 448. No overflow.
//  * Bottom: e4m3 holds every multiple of 2^-9 below 2^-6 (subnormals) and every 4-bit mantissa
//    above, so a two-bit q is exact iff q is a multiple of 2^-9, i.e. (s - t) >= -8 for m = 0.5
//    and m = 1.5. With s_max and s_min the extreme 1x32 scales of the block,
//    s - t >= s_min - (2 + s_max) + 8, so the block is exact whenever s_max - s_min <= 14.
//  * When t is clamped at 0 every q = m x 2^s >= 0.5, still a multiple of 2^-9: exact too.
// Real scale grids satisfy the bound; a block that does not (e.g. an all-zero 1x32 sub-block with
// an extreme scale) is checked element by element, and a block that is truly not representable is
// reported, never rounded.
#include <cstdint>
#include <string>
#include <vector>

namespace plumb::convert {

// Re-encodes one band of `rows` <= 128 rows (a row of 128x128 blocks) starting at weight row
// `row0` (for messages): `packed` [rows, cols/2] bytes, `scales` [rows, ceil(cols/32)] ue8m0.
// Writes `codes` [rows, cols] e4m3 and `block_scales` [ceil(cols/128)] ue8m0. Returns "" or, for
// the first block that cannot be re-encoded exactly, the problem (block, element, scale range).
std::string reencode_fp4_band(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, int64_t row0,
                              uint8_t* codes, uint8_t* block_scales);

// Checks a whole FP4 weight [rows, cols] before any output is written: the scale bound above
// proves most blocks; the rest are re-encoded into scratch to see whether they are exact. Reads
// the packed data only of unproven blocks. Returns up to `max_problems` descriptions
// ("rows a..b, cols c..d: ..."); empty means the whole weight re-encodes losslessly.
std::vector<std::string> fp4_to_fp8_problems(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                                             std::size_t max_problems);

}  // namespace plumb::convert
