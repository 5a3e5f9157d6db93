#include "plumb/verify/run.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "plumb/format/config.h"
#include "plumb/format/npy.h"
#include "plumb/model/model.h"
#include "plumb/model/numerics.h"
#include "plumb/util/error.h"

namespace plumb::verify {

namespace {

namespace fs = std::filesystem;

struct Tap {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// One side's results. Taps are kept in the order the forward emitted them (first emission; a
// repeated name keeps its last values, as a dump directory would).
struct Side {
  std::vector<std::string> order;
  std::map<std::string, Tap> taps;
  std::vector<float> logits;
  std::vector<TokenId> greedy;
  Facts facts;
  std::string residual;  // the model's residual-stream taps, "layer.L.<residual>"
};

void progress(const VerifyOptions& o, const std::string& msg) {
  if (o.progress) std::fprintf(stderr, "verify: %s\n", msg.c_str());
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Loads the model on `backend`, runs the prompt collecting its taps (continuing from `replace`'s
// residual streams when given), then greedy decoding of `steps` tokens; the model is freed before
// returning so the two sides never hold their weights (or device memory) at the same time.
Side run_side(const VerifyOptions& o, const std::string& backend, const char* role, const ReplaceFn& replace = {}) {
  Side s;
  const LoadOptions lo{backend, o.threads, parse_numerics(o.numerics)};
  const Model::GenerateOptions g{o.steps, true, 1.0, 0, false};  // no EOS stop: equal lengths
  Taps taps([&s](const std::string& name, const float* data, const std::vector<int64_t>& shape) {
    auto [it, fresh] = s.taps.try_emplace(name);
    if (fresh) s.order.push_back(name);
    it->second.shape = shape;
    it->second.values.assign(data, data + numel(shape));
  });
  if (replace) taps.with_replacement(replace);
  const auto t0 = std::chrono::steady_clock::now();
  progress(o, fmt::format("{}: loading {} on {}", role, o.model, backend));
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const std::unique_ptr<Model> m = load_model(o.model, lo);
  s.facts = m->facts();
  s.residual = m->residual_tap_suffix();
  progress(o, fmt::format("{}: prefill of {} tokens with taps ({:.1f} s)", role, o.ids.size(), elapsed()));
  s.logits = m->prompt_logits(o.ids, taps);
  if (o.steps > 0) progress(o, fmt::format("{}: {} greedy tokens ({:.1f} s)", role, o.steps, elapsed()));
  if (o.steps > 0) s.greedy = m->generate(o.ids, g);
  progress(o, fmt::format("{}: done ({:.1f} s)", role, elapsed()));
  return s;
}

bool is_selection(const std::string& name) {
  return name.ends_with(".index_topk") || name.ends_with(".ffn.experts");
}

Tap read_dump(const fs::path& p) {
  const NpyArray a = read_npy(p.string());
  if (a.dtype != DType::F32) fail("{}: a tap dump must be float32, got {}", p.string(), dtype_name(a.dtype));
  Tap t{a.shape, std::vector<float>(static_cast<std::size_t>(a.numel()))};
  std::memcpy(t.values.data(), a.data.data(), t.values.size() * sizeof(float));
  return t;
}

}  // namespace

VerifyReport run_verify(const VerifyOptions& o) {
  if (!fs::is_directory(o.model)) fail("{}: the model directory does not exist", o.model);
  if (o.ids.empty()) fail("verify: the prompt has no token ids");
  if (!(o.threshold > 0 && o.threshold <= 1)) fail("verify: --threshold must be in (0, 1], got {}", o.threshold);
  if (o.steps < 0) fail("verify: --steps must be >= 0, got {}", o.steps);
  parse_numerics(o.numerics);  // bad names fail before any loading
  const ModelConfig cfg = load_model_config(o.model);
  for (std::size_t i = 0; i < o.ids.size(); ++i)
    if (o.ids[i] >= static_cast<uint64_t>(cfg.vocab_size))
      fail("verify: token id {} at position {} is outside the vocabulary of {} ids", o.ids[i], i, cfg.vocab_size);
  const bool dumps = !o.against_dumps.empty();
  if (dumps && !fs::exists(fs::path(o.against_dumps) / "logits.npy"))
    fail("{}: no logits.npy here; write the dumps with `plumb logits --dump-taps DIR`", o.against_dumps);

  // A GPU that cannot start is found before the (possibly long) reference run, not after it.
  for (const std::string& name : {o.backend, dumps ? std::string("cpu") : o.against})
    if (name != "cpu") backend::make_backend(name, 1);

  VerifyReport r;
  r.model = o.model;
  r.model_type = cfg.model_type;
  r.backend = o.backend;
  r.against = dumps ? "dumps:" + o.against_dumps : o.against;
  r.numerics = o.numerics;
  r.threshold = o.threshold;
  r.ids = o.ids;
  r.steps = o.steps;
  r.audit = build_facts();
  r.audit.push_back({"command_line", o.command_line});

  // The reference runs first so a failing device run still leaves a complete reference behind.
  Side ref;
  if (dumps) {
    ref.facts = {{"source", "dump directory " + o.against_dumps}};
    ref.logits = read_dump(fs::path(o.against_dumps) / "logits.npy").values;
  } else {
    ref = run_side(o, o.against, "reference");
  }
  // --isolate-layers: the tested forward asks for each residual stream it passes; the reference
  // run's, or the dump directory's (read when first asked for).
  std::map<std::string, std::vector<float>> dumped;
  ReplaceFn replace;
  if (o.isolate_layers && dumps) {
    replace = [&](const std::string& name) -> const std::vector<float>* {
      auto [it, fresh] = dumped.try_emplace(name);
      if (fresh) {
        const fs::path p = fs::path(o.against_dumps) / (name + ".npy");
        if (!fs::exists(p)) fail("verify: --isolate-layers needs {} in the dumps", p.string());
        it->second = read_dump(p).values;
      }
      return &it->second;
    };
  } else if (o.isolate_layers) {
    replace = [&ref](const std::string& name) -> const std::vector<float>* {
      const auto it = ref.taps.find(name);
      return it == ref.taps.end() ? nullptr : &it->second.values;
    };
  }
  const Side got = run_side(o, o.backend, "tested", replace);
  if (o.isolate_layers)
    r.notes.push_back(
        fmt::format("layers isolated: every layer of the tested backend started from the reference's residual "
                    "stream (its layer.L.{} taps), so each layer is compared on equal inputs; greedy decoding still "
                    "runs free",
                    got.residual));
  r.facts_got = got.facts;
  r.facts_ref = ref.facts;
  for (const auto& [key, value] : got.facts)
    if (key == "reduction_order" && value == "fast" && o.numerics == "faithful" && !o.isolate_layers)
      r.notes.push_back(
          "the tested GPU backend sums in its own (fast) order: a few ulps per op, which the faithful profile's "
          "re-quantization can amplify over layers and tokens; PLUMB_GPU_ORDER=cpu makes it sum in the CPU's "
          "order (results then bitwise equal), --isolate-layers judges each layer on equal inputs");

  const std::vector<std::string> order = got.order.empty() ? std::vector<std::string>{"logits"} : got.order;
  for (const std::string& name : order) {
    TapResult t;
    t.name = name;
    const auto gi = got.taps.find(name);
    const Tap g =
        gi != got.taps.end() ? gi->second : Tap{{static_cast<int64_t>(o.ids.size()), cfg.vocab_size}, got.logits};
    t.shape = g.shape;
    Tap rf;
    if (dumps) {
      const fs::path p = fs::path(o.against_dumps) / (name + ".npy");
      if (!fs::exists(p)) {
        t.compared = false;
        t.note = "no " + p.filename().string() + " in the dumps";
        r.taps.push_back(t);
        continue;
      }
      rf = read_dump(p);
    } else if (const auto ri = ref.taps.find(name); ri != ref.taps.end()) {
      rf = ri->second;
    } else if (name == "logits") {
      rf = Tap{g.shape, ref.logits};
    } else {
      t.compared = false;
      t.note = "the reference emitted no such tap";
      r.taps.push_back(t);
      continue;
    }
    // A shape mismatch means the two runs did not compute the same thing (another prompt, another
    // model): that is bad input, not a numerical failure.
    if (rf.shape != g.shape && numel(rf.shape) != numel(g.shape))
      fail("verify: tap {} has shape [{}] here but [{}] in the reference (another prompt or model?)", name,
           fmt::join(g.shape, ", "), fmt::join(rf.shape, ", "));
    t.m = compare(g.values, rf.values);
    t.pass = t.m.nan == 0 && t.m.cosine >= o.threshold;
    if (is_selection(name)) {
      // Integer choices (top-k block ids, routed experts): a cosine of ids means nothing, and a
      // near-tied score may legitimately pick another entry. Reported as the share of ids that
      // agree; the float taps downstream (attention output, ffn output) carry the verdict.
      t.informational = true;
      t.pass = true;
      t.note = fmt::format("selection: {:.2f}% of ids agree; judged through the taps downstream",
                           t.m.n ? 100.0 * static_cast<double>(t.m.n - t.m.differing) / static_cast<double>(t.m.n) : 100.0);
    }
    r.taps.push_back(t);
  }
  if (got.logits.size() != ref.logits.size())
    fail("verify: the reference holds {} logits, this run {} (another prompt or model?)", ref.logits.size(),
         got.logits.size());
  r.logits = compare_logits(got.logits, ref.logits, cfg.vocab_size);
  r.greedy_compared = !dumps && o.steps > 0;
  r.greedy_got = got.greedy;
  r.greedy_ref = ref.greedy;
  if (dumps) r.notes.push_back("the reference is a tap dump: greedy tokens are not compared");
  return r;
}

}  // namespace plumb::verify
