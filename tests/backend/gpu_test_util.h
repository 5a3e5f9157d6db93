#pragma once
// The GPU op harness (in the spirit of llama.cpp's test-backend-ops): every op runs on the same
// random inputs through a fresh CPU backend (the reference) and a fresh GPU backend with
// poisoning on (every new device tensor starts as NaN / INT32_MIN, so an element an op never
// writes shows up), and the results are compared by precision class.
//
// Each fixture draws a fresh seed per test (printed in every failure; PLUMB_TEST_SEED=<n>
// replays it). The cases and their tolerances are data shared with plumb_bench --ops
// (op_cases.h). Without a GPU backend in the build, or without a usable device, every GpuOps test
// skips with the reason. PLUMB_GPU_OPS_ON_CPU=1 runs the harness with a second CPU backend as
// the device under test (a self-check of the harness on machines without a GPU: everything must
// then agree exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "op_cases.h"
#include "op_test_util.h"
#include "plumb/backend/backend.h"
#include "plumb/format/codecs.h"
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
#include "plumb/backend/gpu/gpu_backend.h"
#endif

namespace plumb::test {

using backend::Backend;
using backend::Round;
using backend::Shape;

#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
// The act_fp8 copy a GPU norm wrote beside its output y (GpuStorage::act_fp8; undefined if none).
inline backend::Tensor act_fp8_copy_of(const backend::Tensor& y) {
  return static_cast<gpu::GpuStorage*>(y.storage())->act_fp8;
}
#endif
using backend::Tensor;

// The GPU backend's linear paths a test can force (GpuBackend::LinearPath).
enum class TestLinearPath { Auto, Gemv, Simt, Mma, Fp8, F32Mma, XParts };
inline const char* path_name(TestLinearPath p) {
  static const char* n[] = {"auto", "gemv", "simt", "mma", "fp8", "f32mma", "xparts"};
  return n[static_cast<int>(p)];
}

inline bool print_scores() {
  static const bool on = [] {
    const char* v = std::getenv("PLUMB_TEST_SCORES");
    return v && std::string(v) == "1";
  }();
  return on;
}

// PLUMB_TEST_CASES=k/n: the long per-case loops (the five tests compute-sanitizer's racecheck cut
// at 400 s: it serializes every shared-memory access) run only their cases k, k + n, k + 2n, ...
// in visiting order, so n processes with k = 0 .. n - 1 cover every case between them
// (scripts/device/long_checks.sh, RACE_SHARDS). Unset: every case. A loop makes one CaseShare and
// asks take() once per case, before the case draws its random inputs; the two whose single cases
// outlast racecheck's limit (linear every format, MLA) ask once per (case, format, ...) after the
// draws, so a share's inputs are the full run's. A share that took nothing fails (n above the
// loop's item count): its racecheck "pass" would have checked nothing.
class CaseShare {
 public:
  CaseShare() {
    const char* v = std::getenv("PLUMB_TEST_CASES");
    if (!v || !*v) return;
    long long k = -1, n = 0;
    char tail = 0;
    if (std::sscanf(v, "%lld/%lld%c", &k, &n, &tail) != 2 || n < 1 || k < 0 || k >= n) {
      ADD_FAILURE() << "PLUMB_TEST_CASES is '" << v << "': expected k/n with 0 <= k < n (every case runs)";
      return;
    }
    k_ = k, n_ = n;
    std::printf("[ NOTE ] PLUMB_TEST_CASES=%s: this loop runs its items %lld, %lld + %lld, ...\n", v, k, k, n);
  }
  ~CaseShare() {
    if (n_ <= 1) return;
    std::printf("[ NOTE ] PLUMB_TEST_CASES=%lld/%lld: %lld of the loop's %lld items\n", k_, n_, taken_, i_);
    if (taken_ == 0) ADD_FAILURE() << "PLUMB_TEST_CASES=" << k_ << "/" << n_ << " took none of this loop's " << i_ << " items";
  }
  bool take() {
    const bool mine = n_ <= 1 || i_++ % n_ == k_;
    taken_ += mine;
    return mine;
  }

 private:
  long long k_ = 0, n_ = 1, i_ = 0, taken_ = 0;
};

// Members are public so helpers shared by several tests can be free functions taking the fixture.
class GpuOps : public ::testing::Test {
 public:
  void SetUp() override {
    const char* seed_env = std::getenv("PLUMB_TEST_SEED");
    seed = seed_env ? std::strtoull(seed_env, nullptr, 10)
                    : std::random_device{}() * 0x100000001ull + std::random_device{}();
    rng.seed(seed);
    cpu = backend::make_cpu_backend();
    const char* self = std::getenv("PLUMB_GPU_OPS_ON_CPU");
    if (self && std::string(self) == "1") {
      gpu = backend::make_cpu_backend();
      return;
    }
    if (backend::gpu_backend_name().empty()) GTEST_SKIP() << "plumb was built without a GPU backend";
    if (const std::string why = backend::gpu_unavailable_reason(); !why.empty())
      GTEST_SKIP() << "no usable GPU: " << why;
    gpu = backend::make_gpu_backend();
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    dev = dynamic_cast<plumb::gpu::GpuBackend*>(gpu.get());
    if (dev) dev->set_poison(true);
#endif
  }

  // The device backend's linear path; false when this build cannot select it (the test then
  // says so and covers the automatic choice only).
  bool set_path(TestLinearPath p) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) {
      using P = plumb::gpu::GpuBackend::LinearPath;
      const P map[] = {P::Auto, P::Gemv, P::Simt, P::Mma, P::Fp8, P::F32Mma, P::XParts};
      dev->set_linear_path(map[static_cast<int>(p)]);
      return true;
    }
#endif
    return p == TestLinearPath::Auto;
  }

  // Sparse attention's split kernels for decode-sized batches (on, the default) or the one-kernel
  // form at every size (off).
  void set_split_attention(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) dev->set_split_attention(on);
#endif
    (void)on;
  }
  // The most heads a split P.V block takes and the candidate tiles a scores block takes (0: the
  // backend's choice by batch size).
  void set_split_shapes(int heads, int scores_span = 0) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) dev->set_pv_heads(heads), dev->set_scores_span(scores_span);
#endif
    (void)heads, (void)scores_span;
  }

  // Sparse attention's compressed entries decoded once a call into f32 rows from this reuse (0:
  // always, INT64_MAX: never, negative: the backend's default; GpuBackend::set_entry_reuse);
  // returns how many calls have decoded them so far.
  int64_t set_entry_reuse(int64_t reuse) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_entry_reuse(reuse < 0 ? gpu::GpuBackend::kEntryReuse : reuse), dev->decoded_entry_calls();
#endif
    (void)reuse;
    return 0;
  }
  // A decode step's selected entries decoded once a call (GpuBackend::set_selected_entries); returns
  // how many calls have decoded them so far.
  int64_t set_selected_entries(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_selected_entries(on), dev->selected_entry_calls();
#endif
    (void)on;
    return 0;
  }

  // A decode step's rms_norm writes the act_fp8 copy of its output, which its act_fp8 consumers
  // read (GpuBackend::set_norm_act_fp8); returns how many consumers have read one so far.
  int64_t set_norm_act_fp8(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_norm_act_fp8(on), dev->act_fp8_copy_reads();
#endif
    (void)on;
    return 0;
  }

  // linear_pair() gives two 1-row FP8 GEMVs of one x one launch (GpuBackend::set_linear_pairs);
  // returns how many pairs have taken one launch so far.
  int64_t set_linear_pairs(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_linear_pairs(on), dev->linear_pair_launches();
#endif
    (void)on;
    return 0;
  }

  // norm_rope() as one launch where its kernel takes the shape (GpuBackend::set_norm_rope); returns
  // how many calls have taken it so far.
  int64_t set_norm_rope(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_norm_rope(on), dev->norm_rope_launches();
#endif
    (void)on;
    return 0;
  }

  // hc_pre_norm() in two launches where k::hc_mix_norm takes it (GpuBackend::set_hc_norm);
  // returns how many calls have taken it so far.
  int64_t set_hc_norm(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) return dev->set_hc_norm(on), dev->hc_norm_launches();
#endif
    (void)on;
    return 0;
  }

  // act_fp8 on the GEMV and the grouped experts: applied by the kernels as they stage their input
  // (on, the default) or by a separate quant launch first (off); the same bits either way.
  void set_fused_act_quant(bool on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) dev->set_fused_act_quant(on);
#endif
    (void)on;
  }

  // The grouped experts' tensor-core form (kernels/moe_mma.cu) where it applies at any token
  // count (true), never (false), or from GpuBackend::kMoeMmaMinTokens tokens (nullopt: the
  // default); and how many moe() calls it has served (-1: no CUDA device backend, where the form
  // does not exist: HIP keeps the SIMT kernels).
  void set_moe_mma(std::optional<bool> on) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    using M = plumb::gpu::GpuBackend::MoeMma;
    if (dev) dev->set_moe_mma(!on ? M::Auto : *on ? M::On : M::Off);
#endif
    (void)on;
  }
  // Its kernels' shape (GpuBackend::set_moe_mma_shape): row tiles a block walks and rounds in
  // flight a lane; restore_moe_mma_shape() puts the backend's default back.
  void set_moe_mma_shape(int tiles, int depth) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) dev->set_moe_mma_shape(tiles, depth);
#endif
    (void)tiles, (void)depth;
  }
  void restore_moe_mma_shape() {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    set_moe_mma_shape(plumb::gpu::GpuBackend::kMoeMmaTiles, plumb::gpu::GpuBackend::kMoeMmaDepth);
#endif
  }
  int64_t moe_mma_calls() const {
#if defined(PLUMB_WITH_CUDA)
    if (dev) return dev->moe_mma_calls();
#endif
    return -1;
  }

  // Every element's bits equal (so NaN poison, -0 vs +0 and one-ulp differences all fail).
  void expect_bitwise(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref) {
    ASSERT_EQ(got.size(), ref.size()) << ctx(what);
    int64_t bad = 0, first = -1;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &ref[i], 4) != 0 && bad++ == 0) first = static_cast<int64_t>(i);
    EXPECT_EQ(bad, 0) << ctx(what) << ": " << bad << " of " << got.size() << " elements differ, first at flat index "
                      << first << " (got " << (first >= 0 ? got[first] : 0.f) << ", ref "
                      << (first >= 0 ? ref[first] : 0.f) << ")";
  }

  std::string ctx(const std::string& what) const {
    std::ostringstream s;
    s << what << " [seed " << seed << ", replay with PLUMB_TEST_SEED=" << seed << "]";
    return s.str();
  }

  // Random values never zero: normal(0, stddev) with |v| >= stddev/64 (so a missing write of a
  // zero can not hide, and relative metrics stay meaningful).
  std::vector<float> rnd(int64_t n, float stddev = 1.f) {
    std::vector<float> v = randn(rng, n, stddev);
    for (float& x : v)
      if (std::fabs(x) < stddev / 64) x = std::copysign(stddev / 64, x == 0 ? 1.f : x);
    return v;
  }
  std::vector<float> rnd_bf16(int64_t n, float stddev = 1.f) {
    std::vector<float> v = rnd(n, stddev);
    for (float& x : v) x = bf16(x);
    return v;
  }
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

  // One op on both backends: `op(backend, inputs uploaded to it)`.
  template <class F>
  std::pair<std::vector<float>, std::vector<float>> run_f32(F&& op) {
    Tensor g = op(*gpu), r = op(*cpu);
    if (g.shape() != r.shape())
      ADD_FAILURE() << ctx("shape " + g.shape_str() + " on the GPU, " + r.shape_str() + " on the CPU");
    return {host(*gpu, g), host(*cpu, r)};
  }

  // max|got - ref| / max|ref| <= bar.tol, no NaN anywhere (a NaN on the device side is an element
  // the op did not write, or a computed NaN the CPU does not produce); up to bar.flip_rows rows
  // (the last dimension) may reach bar.flip_tol instead (op_cases.h, Bar).
  void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                    const Shape& shape, const Bar& bar) {
    ASSERT_EQ(got.size(), ref.size()) << ctx(what);
    const std::size_t row = shape.empty() || shape.back() <= 0 ? 1 : static_cast<std::size_t>(shape.back());
    int64_t nan = 0, first_nan = -1, worst = 0;
    double max_abs = 0, max_ref = 0, max_rel = 0;
    std::vector<double> row_abs((got.size() + row - 1) / row, 0.0);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) {
        if (nan++ == 0) first_nan = static_cast<int64_t>(i);
        continue;
      }
      const double d = std::fabs(double(got[i]) - ref[i]);
      if (d > max_abs) max_abs = d, worst = static_cast<int64_t>(i);
      row_abs[i / row] = std::max(row_abs[i / row], d);
      max_ref = std::max(max_ref, std::fabs(double(ref[i])));
      if (std::fabs(ref[i]) > 1e-6) max_rel = std::max(max_rel, d / std::fabs(ref[i]));
    }
    std::ostringstream s;
    s << what << ": shape " << Tensor(nullptr, backend::ElemType::F32, shape).shape_str() << " max abs " << max_abs
      << " max |ref| " << max_ref << " max rel " << max_rel << " worst at " << worst;
    EXPECT_EQ(nan, 0) << ctx(s.str()) << ": " << nan << " NaN/inf (first at flat index " << first_nan << ": got "
                      << (first_nan >= 0 ? got[first_nan] : 0) << ", ref " << (first_nan >= 0 ? ref[first_nan] : 0)
                      << ") - unwritten elements or computed NaN";
    const double norm = max_ref > 0 ? max_ref : 1.0, score = max_abs / norm;
    const int64_t over = std::count_if(row_abs.begin(), row_abs.end(), [&](double a) { return a / norm > bar.tol; });
    // PLUMB_TEST_SCORES=1 prints every comparison's score beside its bar: the measured floors a
    // tolerance is set just above (scripts/device/quick_round.sh collects them).
    if (print_scores()) {
      std::printf("score %.3g tol %.3g %s\n", score, bar.tol, ctx(what).c_str());
      if (bar.flip_rows > 0)
        std::printf("flip rows %lld (room %lld to %.3g) %s\n", static_cast<long long>(over),
                    static_cast<long long>(bar.flip_rows), bar.flip_tol, ctx(what).c_str());
    }
    if (over == 0) return;
    EXPECT_TRUE(over <= bar.flip_rows && score <= bar.flip_tol)
        << ctx(s.str()) << " (max abs / max |ref| = " << score << " > " << bar.tol << " in " << over << " of "
        << row_abs.size() << " rows of " << row << "; room for " << bar.flip_rows << " rows to " << bar.flip_tol << ")";
  }

  template <class F>
  void check(const std::string& what, const Bar& tol, F&& op) {
    Tensor g = op(*gpu), r = op(*cpu);
    ASSERT_EQ(g.shape(), r.shape()) << ctx(what);
    expect_close(what, host(*gpu, g), host(*cpu, r), r.shape(), tol);
  }
  // Integer results (top-k ids, routed experts) must agree exactly; INT32_MIN is poison.
  void expect_equal_i32(const std::string& what, const Tensor& g, const Tensor& r) {
    ASSERT_EQ(g.shape(), r.shape()) << ctx(what);
    const std::vector<int32_t> a = host_i32(*gpu, g), b = host_i32(*cpu, r);
    int64_t bad = 0, first = -1;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && bad++ == 0) first = static_cast<int64_t>(i);
    EXPECT_EQ(bad, 0) << ctx(what + " shape " + r.shape_str()) << ": " << bad << " of " << a.size()
                      << " differ, first at flat index " << first << " (got " << (first >= 0 ? a[first] : 0) << ", ref "
                      << (first >= 0 ? b[first] : 0) << (first >= 0 && a[first] == INT32_MIN ? ", unwritten" : "")
                      << ")";
  }

  Tensor up(Backend& be, const std::vector<float>& v, Shape s) { return be.from_host(v.data(), std::move(s)); }
  Tensor up(Backend& be, const std::vector<int32_t>& v, Shape s) { return be.from_host(v.data(), std::move(s)); }

  uint64_t seed = 0;
  std::mt19937_64 rng;
  std::unique_ptr<Backend> cpu, gpu;
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  plumb::gpu::GpuBackend* dev = nullptr;
#endif
};

// The GPU backend with the reduction order "cpu" (GpuBackend::set_cpu_order): its results must
// be bitwise the CPU backend's (tests/backend/gpu_cpu_order_test.cpp and the MLA case).
class GpuCpuOrder : public GpuOps {
 public:
  void SetUp() override {
    GpuOps::SetUp();
    if (IsSkipped()) return;
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (dev) dev->set_cpu_order(true);
#endif
  }

  template <class F>
  void check_bitwise(const std::string& what, F&& op) {
    Tensor g = op(*gpu), r = op(*cpu);
    ASSERT_EQ(g.shape(), r.shape()) << ctx(what);
    expect_bitwise(what, host(*gpu, g), host(*cpu, r));
  }
};

// An mHC site's and the head's parameters for hc streams of D (V4-Flash: 4 of 4096), random.
struct HcWeights {
  HcWeights(GpuOps& t, int64_t D, int64_t streams = 4)
      : hc(streams),
        fn(f32_weight({(2 + hc) * hc, hc * D}, t.rnd((2 + hc) * hc * hc * D, 0.02f))),
        base(f32_weight({(2 + hc) * hc}, t.rnd((2 + hc) * hc, 0.5f))),
        scale(f32_weight({3}, t.rnd(3, 0.2f))),
        head_fn(f32_weight({hc, hc * D}, t.rnd(hc * hc * D, 0.02f))),
        head_base(f32_weight({hc}, t.rnd(hc, 0.5f))),
        head_scale(f32_weight({1}, t.rnd(1, 0.3f))),
        views{fn.view(), base.view(), scale.view(), head_fn.view(), head_base.view(), head_scale.view()},
        site{&views[0], &views[1], &views[2], 20, 1e-6f, 1e-6f},
        head{&views[3], &views[4], &views[5], 0, 1e-6f, 1e-6f} {}
  HcWeights(const HcWeights&) = delete;  // the params point into this object
  HcWeights& operator=(const HcWeights&) = delete;

  const int64_t hc;  // first: the members below are made from it
  OwnedWeight fn, base, scale, head_fn, head_base, head_scale;
  WeightView views[6];
  backend::HcParams site, head;
};

// The values v as a [rows, cols] weight in each format linear() takes: "f32", "bf16", "fp8 ue8m0",
// "fp8 f32-scale" and, when cols is even (bytes hold pairs), "fp4".
struct FormatWeight {
  std::string name;
  OwnedWeight w;
  WeightView view() const { return name == "fp8 f32-scale" ? f32_scaled_view(w) : w.view(); }
};
inline std::vector<FormatWeight> every_format(int64_t rows, int64_t cols, const std::vector<float>& v,
                                              std::mt19937_64& rng) {
  std::vector<FormatWeight> ws;
  ws.push_back({"f32", f32_weight({rows, cols}, v)});
  ws.push_back({"bf16", bf16_weight({rows, cols}, v)});
  ws.push_back({"fp8 ue8m0", fp8_weight(rows, cols, v)});
  ws.push_back({"fp8 f32-scale", fp8_weight_f32_scales(rows, cols, v, rng)});
  if (cols % 2 == 0) ws.push_back({"fp4", fp4_weight(rows, cols, v)});
  return ws;
}

}  // namespace plumb::test
