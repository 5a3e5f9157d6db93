// plumb_bench: first performance facts of a backend on a (synthetic) DeepSeek-V4 checkpoint.
// Decode time per layer at several batch sizes and prefill throughput, each set beside its floor:
// the bytes a decode step must read (weights it touches, once, and every sequence's KV reads at
// its depth, runtime::decode_kv_read_bytes: what sets the floor at long context) over the
// device's own copy bandwidth measured in the same run. Writes a JSON record and prints a
// Markdown table. --context sets the depth (issue 17 item 4: 4K, 32K, 128K).
//
// Timing: per-layer times come from marks at the layer boundaries (Taps::marks), where the bench
// waits for the device; that adds one synchronization per layer (~10-20 us), so the per-layer
// sum is a little above the plain step time, which is measured separately without marks.
// The plain steps also time the host alone (forward() returning, before the wait): when that is
// close to the step time, the step is bound by the host's launches, not by the kernels.
// Each number is the median of --steps repetitions after a warm-up.
//
// --ops [--filter NAME]: per-op timings instead, over the op harness's case lists (op_bench.h);
// no checkpoint needed.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plumb/backend/backend.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/model_v4.h"
#include "plumb/runtime/kv_layout.h"
#include "plumb/util/error.h"
#include "bench_probe.h"
#include "op_bench.h"

using namespace plumb;
using Clock = std::chrono::steady_clock;
using bench::median;

namespace {

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t j = s.find(',', i);
    out.push_back(std::stoll(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

// Bytes one decode step of layer l must read at batch B: every weight of the layer once, except
// the routed experts, of which only the distinct ones the batch selects are read. With top-k of
// E experts and routing close to uniform, B tokens touch E * (1 - (1 - k/E)^B) experts on average.
struct LayerBytes {
  double fixed = 0, per_expert = 0;
};

std::vector<LayerBytes> layer_bytes(const Checkpoint& ck, int64_t layers) {
  std::vector<LayerBytes> out(static_cast<std::size_t>(layers));
  for (const TensorInfo* t : ck.tensors()) {
    int64_t l = -1;
    if (std::sscanf(t->name.c_str(), "layers.%ld.", &l) != 1 || l < 0 || l >= layers) continue;
    if (t->name.find(".ffn.experts.") != std::string::npos) {
      if (t->name.find(".ffn.experts.0.") != std::string::npos) out[l].per_expert += static_cast<double>(t->nbytes);
    } else {
      out[l].fixed += static_cast<double>(t->nbytes);
    }
  }
  return out;
}

// Multiply-adds of one prefill token through the weights (2 FLOPs each): every matrix of every
// layer (FP4 packs two weights a byte), of the routed experts only top_k, and the head for
// head_rows rows (serving asks for the last position's logits only). Attention's scores and sums
// are not counted, so a TFLOP/s figure from it is a lower bound of the work done.
double prefill_weight_flops(const Checkpoint& ck, int64_t layers, int64_t top_k, int64_t tokens, int64_t head_rows) {
  double per_token = 0, head = 0;
  for (const TensorInfo* t : ck.tensors()) {
    if (t->shape.size() != 2 || !t->name.ends_with(".weight") || t->name.starts_with("embed")) continue;
    const double weights = static_cast<double>(t->numel()) * (t->dtype == DType::I8 ? 2.0 : 1.0);
    int64_t l = -1;
    if (t->name == "head.weight") head = weights;
    else if (std::sscanf(t->name.c_str(), "layers.%ld.", &l) != 1 || l < 0 || l >= layers) continue;
    else if (t->name.find(".ffn.experts.") == std::string::npos) per_token += weights;
    else if (t->name.find(".ffn.experts.0.") != std::string::npos) per_token += static_cast<double>(top_k) * weights;
  }
  return 2.0 * (per_token * static_cast<double>(tokens) + head * static_cast<double>(head_rows));
}

double head_bytes(const Checkpoint& ck) {
  double b = 0;
  for (const char* n : {"head.weight", "norm.weight"})
    if (const TensorInfo* t = ck.find(n)) b += static_cast<double>(t->nbytes);
  return b;
}

constexpr int64_t kContextChunk = 4096;  // tokens a forward when the bench fills a sequence's context

struct Marks {
  backend::Backend* be = nullptr;
  std::vector<std::pair<std::string, Clock::time_point>> at;
  Taps taps() {
    return Taps::marks([this](const std::string& name) {
      if (name == "embed" || name == "logits" || (name.rfind("layer.", 0) == 0 && name.ends_with(".hc"))) {
        be->synchronize();
        at.emplace_back(name, Clock::now());
      }
    });
  }
  // Seconds between consecutive marks: [embed..layer.0.hc] = layer 0 (with the embedding), ...
  std::vector<double> spans() const {
    std::vector<double> s;
    for (std::size_t i = 1; i < at.size(); ++i) s.push_back(std::chrono::duration<double>(at[i].second - at[i - 1].second).count());
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_bench: decode per layer and prefill throughput against the bandwidth floor"};
  std::string model, backend_name = "cuda", numerics = "faithful", batches = "1,8,32", json_out;
  int64_t context = 512, steps = 10, prefill = 4096;
  bool ops = false;
  bench::OpBenchOptions op_opts;
  app.add_option("--model", model, "DeepSeek-V4 checkpoint directory (not with --ops)");
  app.add_flag("--ops", ops, "time each op case of the GPU op harness (tests/backend/op_cases.h) instead");
  app.add_option("--filter", op_opts.filter, "with --ops: only cases whose 'op case' name contains this");
  app.add_option("--reps", op_opts.reps, "with --ops: timed calls per case (median reported)")->capture_default_str();
  app.add_option("--backend", backend_name, "backend")->capture_default_str();
  app.add_option("--numerics", numerics, "faithful or reference")->capture_default_str();
  app.add_option("--batch", batches, "decode batch sizes, comma separated")->capture_default_str();
  app.add_option("--context", context, "tokens already in each sequence before decoding")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--steps", steps, "timed repetitions, half with per-layer marks, half without (median reported)")
      ->check(CLI::Range(int64_t{2}, int64_t{1000000}))
      ->capture_default_str();
  std::string kv_dtype, kv_index_dtype;
  int64_t kv_bf16_recent = 0;
  app.add_option("--kv-dtype", kv_dtype, "KV entries f32|bf16|fp8 (default: the numerics' lossless format)");
  app.add_option("--kv-index-dtype", kv_index_dtype, "indexer keys f32|bf16|fp4 (default: as --kv-dtype's)");
  app.add_option("--kv-bf16-recent", kv_bf16_recent, "entries of the last N positions kept bf16")->capture_default_str();
  app.add_option("--prefill", prefill, "prefill length (0: skip)")->capture_default_str();
  bool prefill_all_logits = false;
  app.add_flag("--prefill-all-logits", prefill_all_logits,
               "the prefill computes every position's logits (as perplexity does), not the last one's only (serving)");
  app.add_option("--json", json_out, "write the results here");
  bool profile_last = false;
  app.add_flag("--profile-last-step", profile_last,
               "capture only each batch's last decode step for a profiler started with capture off "
               "(ncu --profile-from-start off)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (ops) {
      const auto be = backend::make_backend(backend_name);
      const nlohmann::json rec = bench::run_op_bench(*be, op_opts);
      if (!json_out.empty()) std::ofstream(json_out) << rec.dump(1) << "\n";
      return 0;
    }
    if (model.empty()) fail("--model is required (or --ops for per-op timings)");
    LoadOptions opt;
    opt.backend = backend_name;
    opt.numerics = parse_numerics(numerics);
    std::fprintf(stderr, "loading %s ...\n", model.c_str());
    auto m = v4::ModelV4::load(model, opt);
    const ModelConfig& cfg = m->config();
    backend::Backend& be = m->backend();
    const Checkpoint ck = Checkpoint::open(model);
    const auto lb = layer_bytes(ck, cfg.num_hidden_layers);
    const double copy_gbs = bench::copy_bandwidth_gbs(be);  // read + write bytes per second / 1e9
    nlohmann::json rec;
    rec["model"] = model;
    rec["numerics"] = numerics;
    rec["context"] = context;
    rec["steps"] = steps;
    for (auto& [k, v] : be.facts()) rec["facts"][k] = v;
    rec["copy_gbs"] = copy_gbs;
    std::printf("device copy bandwidth (read+write): %.0f GB/s\n", copy_gbs);

    std::mt19937 rng(7);
    std::uniform_int_distribution<TokenId> tok(2, static_cast<TokenId>(cfg.vocab_size - 1));
    auto random_ids = [&](int64_t n) {
      std::vector<TokenId> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = tok(rng);
      return v;
    };
    auto& fwd = m->forward_pass();
    // KV storage: the numerics' lossless default, each part overridable (what the format costs)
    runtime::KvFormat kv_format = runtime::default_kv_format(cfg.arch, opt.numerics == Numerics::Faithful);
    if (!kv_dtype.empty()) kv_format.kv = runtime::parse_kv_dtype(kv_dtype);
    if (!kv_index_dtype.empty()) kv_format.index_keys = runtime::parse_index_key_dtype(kv_index_dtype);
    kv_format.bf16_recent = kv_bf16_recent;
    fwd.kv_pool().set_storage(runtime::kv_storage(kv_format));
    rec["kv"] = fmt::format("{}+{} recent {}", runtime::to_string(kv_format.kv), runtime::to_string(kv_format.index_keys),
                            kv_format.bf16_recent);
    std::printf("KV storage: entries %s, indexer keys %s, bf16 recent %ld\n", runtime::to_string(kv_format.kv),
                runtime::to_string(kv_format.index_keys), static_cast<long>(kv_format.bf16_recent));
    {  // warm-up: uploads every weight, loads kernels
      v4::SequenceState s = fwd.new_sequence();
      const auto ids = random_ids(16);
      SequenceStep in{&s, ids};
      fwd.forward(std::span(&in, 1));
      be.synchronize();
    }
    std::printf("\n| batch | layer | kind | ms/step | floor ms | floor/measured |\n|---|---|---|---|---|---|\n");
    for (int64_t B : parse_list(batches)) {
      std::fprintf(stderr, "batch %ld: prefill %ld x %ld tokens ...\n", B, B, context);
      std::vector<v4::SequenceState> seqs;
      for (int64_t b = 0; b < B; ++b) seqs.push_back(fwd.new_sequence());
      // In chunks of kContextChunk tokens as the engine feeds a long prompt (one forward of 128K
      // rows would hold GBs of activations); the context's logits are not looked at: one row.
      for (int64_t b = 0; b < B; ++b) {
        const auto ids = random_ids(context);
        for (int64_t c0 = 0; c0 < context; c0 += kContextChunk) {
          const int64_t n = std::min(kContextChunk, context - c0), last_row = n - 1;
          SequenceStep in{&seqs[b], std::span(ids).subspan(static_cast<std::size_t>(c0), static_cast<std::size_t>(n)),
                          context};
          fwd.forward(std::span(&in, 1), std::span(&last_row, 1));
        }
      }
      std::vector<std::vector<double>> per_layer(static_cast<std::size_t>(cfg.num_hidden_layers + 1));
      std::vector<double> plain, enqueue;
      const int64_t last_plain = (steps + 1) % 2 == 1 ? steps + 1 : steps;  // the last step without marks
      for (int64_t s = 0; s < steps + 2; ++s) {
        const auto ids = random_ids(B);
        std::vector<SequenceStep> in;
        for (int64_t b = 0; b < B; ++b) in.push_back({&seqs[b], std::span(ids).subspan(b, 1)});
        Marks mk{&be, {}};
        const bool marked = s % 2 == 0, capture = profile_last && s == last_plain;
        if (capture) be.profile_capture(true);
        const auto t0 = Clock::now();
        fwd.forward(in, marked ? mk.taps() : Taps());
        const double host = std::chrono::duration<double>(Clock::now() - t0).count();
        be.synchronize();
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        if (capture) be.profile_capture(false);
        if (s < 2) continue;  // warm-up
        if (!marked) {
          plain.push_back(dt);
          enqueue.push_back(host);
          continue;
        }
        const auto sp = mk.spans();
        for (std::size_t i = 0; i < sp.size() && i < per_layer.size(); ++i) per_layer[i].push_back(sp[i]);
      }
      const double E = static_cast<double>(cfg.n_routed_experts), k = static_cast<double>(cfg.num_experts_per_tok);
      const double touched = E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(B)));
      nlohmann::json jb;
      jb["batch"] = B;
      jb["step_ms"] = median(plain) * 1e3;
      jb["host_enqueue_ms"] = median(enqueue) * 1e3;
      double floor_total = 0;
      for (int64_t l = 0; l <= cfg.num_hidden_layers; ++l) {
        const bool head = l == cfg.num_hidden_layers;
        // the weights, and each sequence's KV reads at its depth (context + the step's token)
        const double kv = head ? 0.0 : static_cast<double>(B * runtime::decode_kv_read_bytes(cfg, l, kv_format, context + 1));
        const double bytes = head ? head_bytes(ck) : lb[l].fixed + touched * lb[l].per_expert + kv;
        const double floor_ms = bytes / (copy_gbs * 1e9) * 1e3;
        floor_total += floor_ms;
        const double ms = median(per_layer[l]) * 1e3;
        const int64_t r = head ? -1 : cfg.compress_ratio(l);
        const std::string kind = head ? "head" : (r == 0 ? "SWA" : (r == 4 ? "CSA" : fmt::format("HCA/{}", r)));
        std::printf("| %ld | %s | %s | %.3f | %.3f | %.2f |\n", B, head ? "head" : std::to_string(l).c_str(), kind.c_str(),
                    ms, floor_ms, ms > 0 ? floor_ms / ms : 0.0);
        jb["layers"].push_back({{"layer", head ? "head" : std::to_string(l)}, {"kind", kind}, {"ms", ms}, {"kv_bytes", kv},
                                {"floor_ms", floor_ms}, {"bytes", bytes}});
      }
      jb["floor_ms"] = floor_total;
      std::printf("| %ld | step (no marks) | | %.3f | %.3f | %.2f |\n", B, median(plain) * 1e3, floor_total,
                  floor_total / (median(plain) * 1e3));
      std::printf("| %ld | step (host enqueue) | | %.3f | | |\n", B, median(enqueue) * 1e3);
      rec["decode"].push_back(jb);
    }
    if (prefill > 0) {
      std::fprintf(stderr, "prefill %ld tokens ...\n", prefill);
      std::vector<double> t;
      const int64_t last = prefill - 1;
      for (int rep = 0; rep < 3; ++rep) {
        v4::SequenceState s = fwd.new_sequence();
        const auto ids = random_ids(prefill);
        SequenceStep in{&s, ids};
        be.synchronize();
        const auto t0 = Clock::now();
        if (prefill_all_logits)
          fwd.forward(std::span(&in, 1));
        else
          fwd.forward(std::span(&in, 1), std::span(&last, 1));
        be.synchronize();
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      const double sec = median(t);
      const double flops =
          prefill_weight_flops(ck, cfg.num_hidden_layers, cfg.num_experts_per_tok, prefill, prefill_all_logits ? prefill : 1);
      std::printf("\nprefill %ld tokens (%s logits): %.1f ms, %.0f tokens/s, %.2f TFLOP/s of weight products\n",
                  prefill, prefill_all_logits ? "every position's" : "the last position's", sec * 1e3,
                  static_cast<double>(prefill) / sec, flops / sec / 1e12);
      rec["prefill"] = {{"tokens", prefill}, {"ms", sec * 1e3}, {"tokens_per_s", static_cast<double>(prefill) / sec},
                        {"all_logits", prefill_all_logits}, {"weight_tflops", flops / sec / 1e12}};
    }
    if (!json_out.empty()) std::ofstream(json_out) << rec.dump(1) << "\n";
    return 0;
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb_bench: error: %s\n", e.what());
    return 2;
  }
}
