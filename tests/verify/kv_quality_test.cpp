// verify::kv_quality on tiny-kjv (CPU, reference numerics, short contexts): f32 storage against
// itself is exact, bf16 / fp8 storage moves the logits a little, and the perplexity it reports
// is the one of a direct computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "plumb/model/model.h"
#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"
#include "plumb/verify/kv_quality.h"

namespace plumb::verify {
namespace {

const std::string kModel = std::string(PLUMB_SOURCE_DIR) + "/models/tiny-kjv";

TEST(KvQuality, F32IsExactAndTheOtherFormatsMoveTheLogitsALittle) {
  auto m = load_model(kModel, {"cpu", 2, Numerics::Reference});
  const std::string text =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness "
      "was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there "
      "be light: and there was light. And God saw the light, that it was good: and God divided the light from the "
      "darkness. And God called the light Day, and the darkness he called Night.";
  const std::vector<std::uint32_t> enc = Tokenizer::load(kModel).encode(text, true);
  const std::vector<TokenId> ids(enc.begin(), enc.end());
  ASSERT_GE(ids.size(), 80u);
  KvQualityOptions o;
  o.contexts = {40, 80};
  o.chunk = 17;  // several chunks per context
  o.perplexity = true;
  const std::vector<KvQualityFormat> formats = kv_quality_formats();
  const std::vector<KvQualityRow> rows = kv_quality(*m, ids, formats, o);
  ASSERT_EQ(rows.size(), formats.size() * 2);
  for (const KvQualityRow& r : rows) {
    if (r.format == "f32") {
      EXPECT_EQ(r.cosine_min, 1.0);
      EXPECT_EQ(r.max_abs_max, 0.0);
    } else {
      EXPECT_GT(r.max_abs_max, 0.0) << r.format << " at " << r.context << ": the format was not used";
      EXPECT_GT(r.cosine_min, 0.99) << r.format;
    }
    EXPECT_GT(r.ppl, 1.0);
    EXPECT_EQ(r.positions, kv_quality_positions(r.context));
  }
  // Perplexity of the first 40 tokens with f32 storage, from one prefill's logits.
  m->set_kv_storage({});
  auto seq = m->new_sequence();
  const SequenceStep step{seq.get(), std::span<const TokenId>(ids).first(40)};
  std::vector<int64_t> all(40);
  for (int64_t i = 0; i < 40; ++i) all[static_cast<std::size_t>(i)] = i;
  const std::vector<float> logits = to_host_floats(m->backend(), m->forward({&step, 1}, all));
  const auto V = static_cast<std::size_t>(m->config().vocab_size);
  double nll = 0;
  for (std::size_t p = 0; p + 1 < 40; ++p) {
    double mx = -INFINITY, s = 0;
    for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[p * V + v]));
    for (std::size_t v = 0; v < V; ++v) s += std::exp(double(logits[p * V + v]) - mx);
    nll += mx + std::log(s) - logits[p * V + ids[p + 1]];
  }
  EXPECT_NEAR(rows[0].ppl, std::exp(nll / 39), 1e-9 * rows[0].ppl);
  EXPECT_THROW(kv_quality(*m, std::span<const TokenId>(ids).first(30), formats, o), Error);  // 80 > 30 ids
}

}  // namespace
}  // namespace plumb::verify
