#include "plumb/verify/kv_quality.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "plumb/util/error.h"

namespace plumb::verify {
namespace {

using backend::KvRowFormat;

double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

double max_abs(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// -log_softmax(logits)[target] in float64.
double nll(std::span<const float> logits, TokenId target) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  double s = 0;
  for (float x : logits) s += std::exp(double(x) - mx);
  return mx + std::log(s) - logits[static_cast<std::size_t>(target)];
}

// One format's prefill: the logits of every compared position and the running NLL at each context.
struct FormatRun {
  std::map<std::int64_t, std::vector<float>> logits;  // position -> row
  std::map<std::int64_t, double> ppl, seconds;        // context -> value
};

FormatRun run_format(Model& model, std::span<const TokenId> ids, const KvQualityFormat& f, const KvQualityOptions& o,
                     const std::vector<std::int64_t>& compared, const KvQualityProgress& progress) {
  model.set_kv_storage(f.storage);
  const std::int64_t total = o.contexts.back(), vocab = model.config().vocab_size;
  std::unique_ptr<SequenceState> seq = model.new_sequence();
  FormatRun run;
  double nll_sum = 0;
  std::size_t next_ctx = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t p = 0; p < total; p += o.chunk) {
    const std::int64_t len = std::min(o.chunk, total - p);
    std::vector<std::int64_t> rows;  // chunk rows whose logits come back
    if (o.perplexity) {
      for (std::int64_t r = 0; r < len; ++r) rows.push_back(r);
    } else {
      for (std::int64_t pos : compared)
        if (pos >= p && pos < p + len) rows.push_back(pos - p);
    }
    const SequenceStep step{seq.get(), ids.subspan(static_cast<std::size_t>(p), static_cast<std::size_t>(len))};
    const std::vector<float> logits = to_host_floats(model.backend(), model.forward({&step, 1}, rows));
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const std::int64_t pos = p + rows[k];
      const std::span<const float> row(logits.data() + k * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      if (std::binary_search(compared.begin(), compared.end(), pos)) run.logits[pos].assign(row.begin(), row.end());
      if (o.perplexity && pos + 1 < total) nll_sum += nll(row, ids[static_cast<std::size_t>(pos + 1)]);
      // Context c's perplexity: the c - 1 next tokens predicted inside its first c tokens.
      while (next_ctx < o.contexts.size() && pos + 2 == o.contexts[next_ctx]) {
        run.ppl[o.contexts[next_ctx]] = std::exp(nll_sum / static_cast<double>(o.contexts[next_ctx] - 1));
        ++next_ctx;
      }
    }
    for (std::int64_t c : o.contexts)
      if (c > p && c <= p + len)
        run.seconds[c] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) progress(f.name, p + len, total);
  }
  return run;
}

}  // namespace

std::vector<KvQualityFormat> kv_quality_formats() {
  return {{"f32", {KvRowFormat::F32, KvRowFormat::F32}},
          {"bf16", {KvRowFormat::BF16, KvRowFormat::BF16}},
          {"fp8", {KvRowFormat::FP8, KvRowFormat::FP4}},
          {"fp8+recent1024", {KvRowFormat::FP8, KvRowFormat::FP4, 1024}}};
}

std::vector<std::int64_t> kv_quality_positions(std::int64_t c) {
  std::vector<std::int64_t> p = {c - 1, c - 1 - c / 8, c - 1 - c / 4, c - 1 - c / 2};
  p.erase(std::remove_if(p.begin(), p.end(), [](std::int64_t x) { return x < 0; }), p.end());
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

std::vector<KvQualityRow> kv_quality(Model& model, std::span<const TokenId> ids, std::span<const KvQualityFormat> formats,
                                     const KvQualityOptions& o, const KvQualityProgress& progress) {
  if (o.contexts.empty()) fail("kv-quality: no contexts given");
  if (formats.empty()) fail("kv-quality: no formats given");
  if (o.chunk < 1) fail("kv-quality: chunks of {} tokens", o.chunk);
  for (std::size_t i = 0; i < o.contexts.size(); ++i)
    if (o.contexts[i] < 2 || (i > 0 && o.contexts[i] <= o.contexts[i - 1]))
      fail("kv-quality: contexts must be ascending and at least 2, got {} after {}", o.contexts[i],
           i > 0 ? o.contexts[i - 1] : 0);
  if (o.contexts.back() > static_cast<std::int64_t>(ids.size()))
    fail("kv-quality: context {} needs {} tokens; the input has {}", o.contexts.back(), o.contexts.back(), ids.size());
  std::vector<std::int64_t> compared;
  for (std::int64_t c : o.contexts)
    for (std::int64_t p : kv_quality_positions(c)) compared.push_back(p);
  std::sort(compared.begin(), compared.end());
  compared.erase(std::unique(compared.begin(), compared.end()), compared.end());

  std::vector<FormatRun> runs;
  for (const KvQualityFormat& f : formats) runs.push_back(run_format(model, ids, f, o, compared, progress));
  std::vector<KvQualityRow> rows;
  for (std::size_t fi = 0; fi < formats.size(); ++fi)
    for (std::int64_t c : o.contexts) {
      KvQualityRow r;
      r.format = formats[fi].name;
      r.context = c;
      r.positions = kv_quality_positions(c);
      for (std::int64_t p : r.positions) {
        const std::vector<float>& got = runs[fi].logits.at(p);
        const std::vector<float>& ref = runs[0].logits.at(p);
        const double cs = cosine(got, ref), ma = max_abs(got, ref);
        r.cosine_min = std::min(r.cosine_min, cs);
        r.max_abs_max = std::max(r.max_abs_max, ma);
        if (p == c - 1) {
          r.cosine_last = cs;
          r.max_abs_last = ma;
        }
      }
      if (o.perplexity) r.ppl = runs[fi].ppl.at(c);
      r.seconds = runs[fi].seconds.at(c);
      rows.push_back(r);
    }
  return rows;
}

nlohmann::json kv_quality_json(std::span<const KvQualityRow> rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const KvQualityRow& r : rows)
    out.push_back({{"format", r.format},
                   {"context", r.context},
                   {"positions", r.positions},
                   {"cosine_last", r.cosine_last},
                   {"max_abs_last", r.max_abs_last},
                   {"cosine_min", r.cosine_min},
                   {"max_abs_max", r.max_abs_max},
                   {"ppl", r.ppl},
                   {"seconds", r.seconds}});
  return out;
}

std::string kv_quality_markdown(std::span<const KvQualityRow> rows) {
  const bool ppl = std::any_of(rows.begin(), rows.end(), [](const KvQualityRow& r) { return r.ppl > 0; });
  std::string t = "| format | context | cosine (last) | max abs diff (last) | cosine (min of 4) | max abs diff (max of 4) |";
  t += ppl ? " perplexity |\n" : "\n";
  t += "|---|---:|---:|---:|---:|---:|";
  t += ppl ? "---:|\n" : "\n";
  for (const KvQualityRow& r : rows) {
    t += fmt::format("| {} | {} | {:.9f} | {:.3g} | {:.9f} | {:.3g} |", r.format, r.context, r.cosine_last,
                     r.max_abs_last, r.cosine_min, r.max_abs_max);
    t += ppl ? fmt::format(" {:.4f} |\n", r.ppl) : "\n";
  }
  return t;
}

}  // namespace plumb::verify
