// plumb convert cast --to bf16: dequantize FP8 (and optionally FP4) weights to BF16.
#include <algorithm>
#include <vector>

#include "plumb/convert/convert.h"
#include "plumb/convert/plan.h"
#include "plumb/convert/source.h"
#include "plumb/format/codecs.h"
#include "plumb/format/config.h"
#include "plumb/util/error.h"
#include "plumb/util/finite.h"

namespace plumb::convert {
namespace {

namespace fs = std::filesystem;

// Dequantized rows are produced in bands: 128 rows (one row of FP8 scale blocks) or, for FP4, as
// many rows as fit this many values. Memory is one band in f32 plus one in bf16.
constexpr int64_t kBandValues = 1 << 20;

// A NaN or infinity (an FP8 NaN code, a 0xFF E8M0 scale) is refused, not written: the converted
// checkpoint would load and then compute NaN logits. `first` is the index of f[0] in the tensor.
void put_bf16(const std::vector<float>& f, std::size_t n, std::vector<uint16_t>& bf, const TensorSink& sink,
              const std::string& name, int64_t first) {
  require_finite(std::span(f.data(), n), name, first);
  for (std::size_t i = 0; i < n; ++i) bf[i] = f32_to_bf16(f[i]);
  sink(std::as_bytes(std::span(bf.data(), n)));
}

// FP8 e4m3 x (E8M0 | F32) scale -> f32 (exact for E8M0, one rounding for F32) -> bf16 (RNE).
// With E8M0 scales the whole cast is exact: 4 significant bits fit bf16's 8.
Producer fp8_to_bf16(const Checkpoint& ckpt, const QuantizedTensor& q) {
  return [&ckpt, &q](const TensorSink& sink) {
    const SourceTensor wt(ckpt, *q.weight), st(ckpt, *q.scale);
    const auto w = wt.bytes();
    const auto s = st.bytes();
    const std::size_t scale_row = static_cast<std::size_t>((q.cols + 127) / 128) * dtype_size(q.scale->dtype);
    std::vector<float> f(static_cast<std::size_t>(128 * q.cols));
    std::vector<uint16_t> bf(f.size());
    for (int64_t r0 = 0; r0 < q.rows; r0 += 128) {
      const int64_t n = std::min<int64_t>(128, q.rows - r0);
      const auto part = w.subspan(static_cast<std::size_t>(r0 * q.cols), static_cast<std::size_t>(n * q.cols));
      dequant_fp8_block128(reinterpret_cast<const uint8_t*>(part.data()), n, q.cols,
                           s.data() + static_cast<std::size_t>(r0 / 128) * scale_row, q.scale->dtype, f.data());
      put_bf16(f, static_cast<std::size_t>(n * q.cols), bf, sink, q.weight->name, r0 * q.cols);
      wt.release(part);
    }
    st.release();
  };
}

// FP4 e2m1 x 2^k -> bf16 is exact (2 significant bits).
Producer fp4_to_bf16(const Checkpoint& ckpt, const QuantizedTensor& q) {
  return [&ckpt, &q](const TensorSink& sink) {
    const SourceTensor wt(ckpt, *q.weight), st(ckpt, *q.scale);
    const auto w = wt.bytes();
    const auto s = st.bytes();
    const int64_t nsub = (q.cols + 31) / 32;
    const int64_t band = std::max<int64_t>(1, kBandValues / q.cols);
    std::vector<float> f(static_cast<std::size_t>(std::min(band, q.rows) * q.cols));
    std::vector<uint16_t> bf(f.size());
    for (int64_t r0 = 0; r0 < q.rows; r0 += band) {
      const int64_t n = std::min(band, q.rows - r0);
      const auto part = w.subspan(static_cast<std::size_t>(r0 * q.cols / 2), static_cast<std::size_t>(n * q.cols / 2));
      dequant_fp4_block32(reinterpret_cast<const uint8_t*>(part.data()), n, q.cols,
                          reinterpret_cast<const uint8_t*>(s.data()) + r0 * nsub, f.data());
      put_bf16(f, static_cast<std::size_t>(n * q.cols), bf, sink, q.weight->name, r0 * q.cols);
      wt.release(part);
    }
    st.release();
  };
}

}  // namespace

ConvertReport convert_cast(const CastOptions& o) {
  const fs::path src = source_dir(o.src);
  const Checkpoint ckpt = Checkpoint::open(src.string());
  load_model_config(src.string());  // validates that SRC is a model plumb understands
  const QuantMap quant(ckpt);

  ConversionPlan plan;
  plan.label = o.experts ? "cast bf16 (+experts)" : "cast bf16";
  plan.write_index = fs::exists(src / Checkpoint::kIndexName);
  for (const auto& shard : ckpt.shards()) {
    const std::size_t file = plan.files.size();
    plan.files.push_back({fs::path(shard->path()).filename().string(), shard->metadata()});
    bool any = false;
    for (const TensorInfo& t : shard->tensors()) {
      const QuantizedTensor* owner = quant.scale_of(t.name);
      const QuantizedTensor* q = quant.weight(t.name);
      if (owner && (owner->format == QuantFormat::FP8Block128 || o.experts)) {
        ++plan.dropped;  // the scale of a weight written as bf16
        continue;
      }
      PlannedTensor pt;
      pt.source_bytes = t.nbytes;
      if (q && q->format == QuantFormat::FP8Block128) {
        pt.entry = {t.name, DType::BF16, {q->rows, q->cols}};
        pt.produce = fp8_to_bf16(ckpt, *q);
        pt.source_bytes += q->scale->nbytes;
        pt.converted = true;
      } else if (q && o.experts) {
        pt.entry = {t.name, DType::BF16, {q->rows, q->cols}};
        pt.produce = fp4_to_bf16(ckpt, *q);
        pt.source_bytes += q->scale->nbytes;
        pt.converted = true;
      } else {
        pt.entry = {t.name, t.dtype, t.shape};
        pt.produce = copy_of(ckpt, t);
      }
      plan.tensors.emplace_back(file, std::move(pt));
      any = true;
    }
    if (!any) plan.files.pop_back();  // a shard that held only scales has nothing left
  }
  const int64_t converted =
      std::count_if(plan.tensors.begin(), plan.tensors.end(), [](const auto& p) { return p.second.converted; });
  if (converted == 0)
    fail("{}: nothing to cast: no FP8 weights{}", src.string(),
         quant.count(QuantFormat::FP4Block32) ? " (FP4 experts are cast only with --experts)" : " and no FP4 experts");

  plan.config = read_config_json(src);
  plan.config.erase("quantization_config");          // no FP8 weight is left for it to describe
  if (o.experts) plan.config.erase("expert_dtype");  // experts are bf16 now; the binder detects that
  note_conversion(plan.config, {{"command", "cast"},
                                {"to", "bf16"},
                                {"experts", o.experts},
                                {"dequantized_tensors", converted},
                                {"dropped_scales", plan.dropped}});
  return execute_plan(src, plan, o.out);
}

}  // namespace plumb::convert
