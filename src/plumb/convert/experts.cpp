// plumb convert experts --to fp8: FP4 routed experts re-encoded losslessly to FP8 128x128.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "plumb/convert/convert.h"
#include "plumb/convert/fp4_to_fp8.h"
#include "plumb/convert/plan.h"
#include "plumb/convert/source.h"
#include "plumb/format/config.h"
#include "plumb/format/json_util.h"
#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::convert {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kProblemsShown = 5;

// Proves (or refutes) exactness for every FP4 weight before DST is created: reads all FP4 scales
// (1/16 of the expert bytes) and the data of the rare blocks the scale bound does not cover.
void check_all_exact(const Checkpoint& ckpt, const std::vector<const QuantizedTensor*>& fp4, bool show_progress) {
  uint64_t scale_bytes = 0;
  for (const auto* q : fp4) scale_bytes += q->scale->nbytes;
  Progress progress("check exactness", scale_bytes, show_progress);
  std::vector<std::string> problems;
  for (const auto* q : fp4) {
    const SourceTensor wt(ckpt, *q->weight), st(ckpt, *q->scale);
    const auto w = wt.bytes();
    const auto s = st.bytes();
    for (auto& p : fp4_to_fp8_problems(reinterpret_cast<const uint8_t*>(w.data()),
                                       reinterpret_cast<const uint8_t*>(s.data()), q->rows, q->cols, kProblemsShown))
      problems.push_back(fmt::format("{}: {}", q->weight->name, p));
    wt.release();
    st.release();
    progress.advance(s.size());
  }
  progress.finish();
  if (problems.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < std::min(problems.size(), kProblemsShown); ++i) list += "\n  " + problems[i];
  fail("{}: {} block(s) of FP4 experts cannot be re-encoded to FP8 exactly; refusing (no output written):{}{}",
       ckpt.root(), problems.size(), list, problems.size() > kProblemsShown ? "\n  ..." : "");
}

// The FP8 block scales of one weight, produced while its codes are written and written right
// after them as the weight's `.scale`.
using ScaleStash = std::shared_ptr<std::vector<uint8_t>>;

Producer fp4_to_fp8_codes(const Checkpoint& ckpt, const QuantizedTensor& q, ScaleStash stash) {
  return [&ckpt, &q, stash](const TensorSink& sink) {
    const SourceTensor wt(ckpt, *q.weight), st(ckpt, *q.scale);
    const auto w = wt.bytes();
    const auto s = st.bytes();
    const int64_t nsub = (q.cols + 31) / 32, grid_cols = (q.cols + 127) / 128;
    stash->assign(static_cast<std::size_t>((q.rows + 127) / 128 * grid_cols), 0);
    std::vector<uint8_t> codes(static_cast<std::size_t>(128 * q.cols));
    for (int64_t r0 = 0; r0 < q.rows; r0 += 128) {
      const int64_t n = std::min<int64_t>(128, q.rows - r0);
      const auto part = w.subspan(static_cast<std::size_t>(r0 * q.cols / 2), static_cast<std::size_t>(n * q.cols / 2));
      const std::string problem = reencode_fp4_band(reinterpret_cast<const uint8_t*>(part.data()),
                                                    reinterpret_cast<const uint8_t*>(s.data()) + r0 * nsub, n, q.cols,
                                                    r0, codes.data(), stash->data() + (r0 / 128) * grid_cols);
      // check_all_exact() proved every block beforehand; reaching this is a bug, not bad input.
      if (!problem.empty()) throw std::logic_error(q.weight->name + ": " + problem);
      sink(std::as_bytes(std::span(codes.data(), static_cast<std::size_t>(n * q.cols))));
      wt.release(part);
    }
    st.release();
  };
}

}  // namespace

ConvertReport convert_experts_fp8(const ExpertsOptions& o) {
  const fs::path src = source_dir(o.src);
  const Checkpoint ckpt = Checkpoint::open(src.string());
  const ModelConfig cfg = load_model_config(src.string());
  if (cfg.arch != Arch::DeepseekV4)
    fail("{}: {} has no FP4 experts; experts --to fp8 is for deepseek_v4", src.string(), cfg.model_type);
  const QuantMap quant(ckpt);
  std::vector<const QuantizedTensor*> fp4;
  for (const TensorInfo* t : ckpt.tensors())
    if (const auto* q = quant.weight(t->name); q && q->format == QuantFormat::FP4Block32) fp4.push_back(q);
  if (fp4.empty())
    fail("{}: no FP4 experts to re-encode (the experts are not packed FP4 with 1x32 scales)", src.string());
  check_all_exact(ckpt, fp4, o.out.progress);

  ConversionPlan plan;
  plan.label = "experts fp8";
  plan.write_index = fs::exists(src / Checkpoint::kIndexName);
  for (const auto& shard : ckpt.shards()) {
    const std::size_t file = plan.files.size();
    plan.files.push_back({fs::path(shard->path()).filename().string(), shard->metadata()});
    for (const TensorInfo& t : shard->tensors()) {
      if (const auto* owner = quant.scale_of(t.name); owner && owner->format == QuantFormat::FP4Block32)
        continue;  // replaced by the new scale written right after its weight
      const QuantizedTensor* q = quant.weight(t.name);
      if (!q || q->format != QuantFormat::FP4Block32) {
        plan.tensors.emplace_back(file, PlannedTensor{{t.name, t.dtype, t.shape}, t.nbytes, copy_of(ckpt, t)});
        continue;
      }
      auto stash = std::make_shared<std::vector<uint8_t>>();
      plan.tensors.emplace_back(file, PlannedTensor{{t.name, DType::F8_E4M3, {q->rows, q->cols}},
                                                    t.nbytes + q->scale->nbytes,
                                                    fp4_to_fp8_codes(ckpt, *q, stash),
                                                    true});
      plan.tensors.emplace_back(
          file, PlannedTensor{{q->scale->name, DType::F8_E8M0, {(q->rows + 127) / 128, (q->cols + 127) / 128}},
                              0,
                              [stash](const TensorSink& sink) { sink(std::as_bytes(std::span(*stash))); },
                              true});
    }
  }
  plan.config = read_config_json(src);
  plan.config["expert_dtype"] = "fp8";
  note_conversion(plan.config,
                  {{"command", "experts"}, {"to", "fp8"}, {"reencoded_tensors", fp4.size()}, {"lossless", true}});
  return execute_plan(src, plan, o.out);
}

}  // namespace plumb::convert
