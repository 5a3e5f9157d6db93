// KV sizes against MODEL-SPEC section 5's V4-Flash figures (worked out there from the release's
// storage formats, not from this code): 6,880 B/token in bf16, about 3,509 B/token with FP8 +
// FP4, 128 KiB of bf16 window per layer and 12.2 MB of compressor state per sequence.
#include <gtest/gtest.h>

#include "plumb/runtime/kv_layout.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

const ModelConfig kFlash = load_model_config(std::string(PLUMB_TEST_DATA) + "/configs/deepseek-v4-flash.json");

TEST(KvLayout, V4FlashBf16MatchesTheSpec) {
  const KvLayout l = kv_layout(kFlash, 256, {KvDtype::kBF16, IndexKeyDtype::kBF16});
  EXPECT_EQ(l.bytes_per_block, 6880 * 256);
  // Windows: 43 layers x 128 entries x 512 values, f32 in every format (plumb keeps the ring in
  // f32; the spec's 128 KiB is a bf16 ring); compressors: 21 x (64 + 16) KiB + 20 x 512 KiB.
  EXPECT_EQ(l.state_bytes_per_seq, 43 * 128 * 2048 + (21 * 80 + 20 * 512) * 1024);
}

TEST(KvLayout, V4FlashFp8Fp4MatchesTheSpec) {
  const KvLayout l = kv_layout(kFlash, 128, {KvDtype::kFP8, IndexKeyDtype::kFP4});
  // Per 128 positions: CSA 32 entries of 583 B + 32 keys of 68 B, HCA one entry of 583 B; each
  // entry stored in whole 4-byte words (584 B, as AMD's ATOM stores it).
  EXPECT_EQ(l.bytes_per_block, 21 * (32 * 584 + 32 * 68) + 20 * 584);
  EXPECT_NEAR(static_cast<double>(l.bytes_per_block) / 128, 3509, 6);
  const KvLayout f32 = kv_layout(kFlash, 512, {});
  EXPECT_EQ(f32.bytes_per_block, 2 * 6880 * 512);
}

// --kv-bf16-recent 1024: per sequence a ring of 1024/m + 1 entries (f32 rows of bf16 values)
// per compressed layer: 257 for the 21 CSA layers, 9 for the 20 HCA layers.
TEST(KvLayout, Bf16RecentRingsArePerSequenceState) {
  const KvLayout plain = kv_layout(kFlash, 256, {KvDtype::kFP8, IndexKeyDtype::kFP4});
  const KvLayout recent = kv_layout(kFlash, 256, {KvDtype::kFP8, IndexKeyDtype::kFP4, 1024});
  EXPECT_EQ(recent.bytes_per_block, plain.bytes_per_block);
  EXPECT_EQ(recent.state_bytes_per_seq - plain.state_bytes_per_seq, (21 * 257 + 20 * 9) * 2048);
  EXPECT_NE(memory_table(recent, 0, 10, 1, 1 << 20).find("the last 1024 positions bf16"), std::string::npos);
}

// One decode step's KV reads (MODEL-SPEC 5, "what one decode step reads per layer"), worked out by
// hand for V4-Flash (window 128 f32 rows of 2,048 B; CSA ratio 4 with top-512 of 584 B fp8 entries
// and 68 B fp4 keys; HCA ratio 128): layer 0 is sliding-window only, 2 CSA, 3 HCA.
TEST(KvLayout, DecodeReadsTheWindowTheSelectedEntriesAndEveryIndexerKey) {
  const KvFormat q{KvDtype::kFP8, IndexKeyDtype::kFP4};
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 0, q, 4096), 128 * 2048);
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 0, q, 100), 100 * 2048);  // a window not yet full
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 2, q, 4096), 128 * 2048 + 512 * 584 + 1024 * 68);
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 2, q, 1000), 128 * 2048 + 250 * 584 + 250 * 68);  // fewer than top-k
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 3, q, 4096), 128 * 2048 + 32 * 584);
  // 128K positions, bf16: 32,768 keys of 256 B dominate the CSA layer.
  EXPECT_EQ(decode_kv_read_bytes(kFlash, 2, {KvDtype::kBF16, IndexKeyDtype::kBF16}, 131072),
            128 * 2048 + 512 * 1024 + 32768 * 256);
  const ModelConfig v3 = load_model_config(std::string(PLUMB_TEST_DATA) + "/configs/deepseek-v3.json");
  EXPECT_THROW(decode_kv_read_bytes(v3, 0, q, 16), Error);
}

TEST(KvLayout, DefaultFormatsAndNames) {
  const KvFormat faithful = default_kv_format(Arch::DeepseekV4, true), reference = default_kv_format(Arch::DeepseekV4, false);
  EXPECT_EQ(faithful.kv, KvDtype::kFP8);
  EXPECT_EQ(faithful.index_keys, IndexKeyDtype::kFP4);
  EXPECT_EQ(reference.kv, KvDtype::kF32);
  EXPECT_EQ(reference.index_keys, IndexKeyDtype::kF32);
  EXPECT_EQ(default_kv_format(Arch::DeepseekV3, true).kv, KvDtype::kBF16);
  EXPECT_EQ(kv_storage(faithful).entries, backend::KvRowFormat::FP8);
  EXPECT_EQ(kv_storage(faithful).index_keys, backend::KvRowFormat::FP4);
  EXPECT_EQ(parse_kv_dtype("bf16"), KvDtype::kBF16);
  EXPECT_EQ(parse_index_key_dtype("fp4"), IndexKeyDtype::kFP4);
  EXPECT_THROW(parse_kv_dtype("fp4"), Error);
  EXPECT_THROW(parse_index_key_dtype("fp8"), Error);
}

TEST(KvLayout, V3StoresTheLatentAndRopeKeyPerToken) {
  const ModelConfig v3 = load_model_config(std::string(PLUMB_TEST_DATA) + "/configs/deepseek-v3.json");
  const KvLayout l = kv_layout(v3, 128, {KvDtype::kBF16, IndexKeyDtype::kBF16});
  EXPECT_EQ(l.bytes_per_block, 61 * 128 * 576 * 2);  // MODEL-SPEC 5: 70,272 B/token in bf16
  EXPECT_EQ(l.state_bytes_per_seq, 0);
  // fp8 latents: 512 e4m3 + 8 scales, rope keys bf16.
  EXPECT_EQ(kv_layout(v3, 128, {KvDtype::kFP8, IndexKeyDtype::kF32}).bytes_per_block, 61 * 128 * (520 + 128));
}

TEST(KvLayout, BlockSizesAndPoolSizing) {
  EXPECT_THROW(kv_layout(kFlash, 64, {}), Error);
  EXPECT_THROW(kv_layout(kFlash, 192, {}), Error);
  const KvLayout l = kv_layout(kFlash, 256, {KvDtype::kBF16, IndexKeyDtype::kBF16});
  const std::int64_t mib = 1 << 20;
  // 1 GiB less 4 sequences' state, in blocks of 6880 * 256 bytes.
  EXPECT_EQ(pool_blocks(l, 1024, 4), (1024 * mib - 4 * l.state_bytes_per_seq) / l.bytes_per_block);
  try {
    pool_blocks(l, 64, 8);  // 8 x 16.7 MiB of state do not fit 64 MiB
    FAIL() << "accepted a pool smaller than its sequences' state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-seqs"), std::string::npos) << e.what();
  }
  const std::string t = memory_table(l, 1000, 10, 4, 1 << 20);
  EXPECT_NE(t.find("2560 token positions in all and 4 sequences at once; 0 sequences at the full context"), std::string::npos) << t;
}

}  // namespace
}  // namespace plumb::runtime
