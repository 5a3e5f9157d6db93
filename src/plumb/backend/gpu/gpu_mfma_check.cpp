// GPU backend: the run-time self-check of linear()'s bf16 matrix-core path on HIP. The gfx90a MFMA
// kernel (kernels/linear_gemm.cu) was written from AMD's documented operand layouts and compiled,
// but never run by us (no AMD GPU), so before its first use on a HIP device it is compared with
// the SIMT bf16 kernel (same tiles and numerics, the loop every other HIP target runs) and with an
// exact host reference on small odd-sized problems. On any mismatch, launch error or non-finite
// value it prints one warning to stderr and linear() uses the SIMT kernel from then on.
// The inputs make every partial sum exact in f32 (small integers times powers of two, no
// subnormals), so any summation order gives the same bits: a correct kernel differs by exactly 0,
// and the 1e-5 relative bound below is slack, not noise allowance.
// On CUDA nothing is checked: mma.sync runs on the devices CI tests.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/linear.h"

namespace plumb::gpu {

namespace {

using Launcher = gpuError_t (*)(const k::LinearArgs&, const WeightRef&, gpuStream_t);

struct CheckCase {
  const char* name;
  WFormat format;
  int64_t N, G, R, K;
  bool round_bf16;
  bool scale_f32 = false;  // FP8 only
};

// Odd sizes: partial 64-row / 64-col output tiles, a partial 32-wide k-tile, several groups, and
// every weight format (one kernel instance each): BF16, FP8 with ue8m0 scales and FP4 (what Auto
// sends to the bf16 GEMM), F32 and FP8 with f32 scales (forced, or rounded by bf16_weight).
constexpr CheckCase kCases[] = {
    {"bf16 N=67 R=130 K=96", WFormat::BF16, 67, 1, 130, 96, false},
    {"fp8 grouped N=33 G=3 R=70 K=40 bf16-out", WFormat::FP8, 33, 3, 70, 40, true},
    {"fp4 grouped N=67 G=2 R=65 K=64", WFormat::FP4, 67, 2, 65, 64, false},
    {"f32 N=9 R=64 K=32", WFormat::F32, 9, 1, 64, 32, false},
    {"fp8 f32-scale N=70 R=129 K=48", WFormat::FP8, 70, 1, 129, 48, false, true},
};

struct Rng {  // xorshift32: deterministic inputs, no <random> distribution differences
  uint32_t s;
  uint32_t next() {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return s;
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint32_t>(n)); }
};

struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) (void)gpuFree(p);
  }
};

// A device copy of `bytes` host bytes (at least 1 byte, so every pointer is valid).
gpuError_t upload(DeviceBuffer& b, const void* host, std::size_t bytes) {
  gpuError_t e = gpuMalloc(&b.p, bytes ? bytes : 1);
  if (e != gpuSuccess) return e;
  return bytes ? gpuMemcpy(b.p, host, bytes, gpuMemcpyHostToDevice) : gpuSuccess;
}

std::string fmt_err(const char* what, gpuError_t e) { return std::string(what) + ": " + gpuGetErrorString(e); }

// Runs one case through `hw` and `simt`; empty when both match the exact reference, else why not.
std::string run_case(const CheckCase& c, Launcher hw, Launcher simt, gpuStream_t s, Rng& rng) {
  const int64_t N = c.N, G = c.G, R = c.R, K = c.K, rows = G * R;
  const int64_t ldx = G * K + 5, ldy = G * R + 3;  // padded rows: reads and writes past the end show
  // x: integers in [-16, 16] / 16 (exact in bf16); the row padding holds 1000 (read, it would show).
  std::vector<float> x(static_cast<std::size_t>(N * ldx), 1000.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < G * K; ++i) x[n * ldx + i] = static_cast<float>(rng.below(33) - 16) / 16.f;
  // The weight's values (for the reference) and its stored bytes and scales.
  std::vector<double> wv(static_cast<std::size_t>(rows * K));
  std::vector<uint8_t> data, scale;
  WeightRef w;
  w.format = c.format;
  w.rows = rows, w.cols = K;
  if (c.format == WFormat::BF16 || c.format == WFormat::F32) {  // integers in [-64, 64] / 32
    const int bytes = c.format == WFormat::BF16 ? 2 : 4;
    data.resize(static_cast<std::size_t>(rows * K * bytes));
    for (int64_t i = 0; i < rows * K; ++i) {
      const float v = static_cast<float>(rng.below(129) - 64) / 32.f;  // 7 significant bits
      uint32_t u;
      std::memcpy(&u, &v, 4);
      if (bytes == 2) {
        const uint16_t b = static_cast<uint16_t>(u >> 16);  // exact: the low 16 bits are zero
        std::memcpy(&data[2 * i], &b, 2);
      } else {
        std::memcpy(&data[4 * i], &u, 4);
      }
      wv[i] = v;
    }
  } else if (c.format == WFormat::FP8) {  // normal e4m3 codes, exponent field 4..10; scales 2^-1..2^1
    w.scale_f32 = c.scale_f32;
    w.scale_cols = (K + 127) / 128;
    const int64_t nscales = (rows + 127) / 128 * w.scale_cols;
    std::vector<int> exps(static_cast<std::size_t>(nscales));
    for (auto& e : exps) e = rng.below(3) - 1;
    scale.resize(static_cast<std::size_t>(nscales * (c.scale_f32 ? 4 : 1)));
    for (int64_t i = 0; i < nscales; ++i) {
      if (c.scale_f32) {
        const float f = std::ldexp(1.f, exps[i]);
        std::memcpy(&scale[4 * i], &f, 4);
      } else {
        scale[i] = static_cast<uint8_t>(127 + exps[i]);
      }
    }
    data.resize(static_cast<std::size_t>(rows * K));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const int sign = rng.below(2), e = 4 + rng.below(7), m = rng.below(8);
        data[r * K + k] = static_cast<uint8_t>(sign << 7 | e << 3 | m);
        const double sc = std::ldexp(1.0, exps[(r / 128) * w.scale_cols + k / 128]);
        wv[r * K + k] = (sign ? -1.0 : 1.0) * std::ldexp(8.0 + m, e - 10) * sc;
      }
  } else {  // FP4: any e2m1 code (element 2j in the low nibble of byte j); ue8m0 2^-1..2^1 per 1x32
    static constexpr double kE2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    w.scale_cols = (K + 31) / 32;
    scale.resize(static_cast<std::size_t>(rows * w.scale_cols));
    for (auto& b : scale) b = static_cast<uint8_t>(126 + rng.below(3));
    data.assign(static_cast<std::size_t>(rows * K / 2), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const int code = rng.below(16);
        const int64_t i = r * K + k;
        data[i >> 1] |= static_cast<uint8_t>((i & 1) ? code << 4 : code);
        const double sc = std::ldexp(1.0, scale[r * w.scale_cols + k / 32] - 127);
        wv[i] = ((code & 8) ? -1.0 : 1.0) * kE2m1[code & 7] * sc;
      }
  }
  // Exact reference (every product and partial sum is a small multiple of a power of two).
  std::vector<float> ref(static_cast<std::size_t>(N * G * R));
  double ref_max = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = 0; r < R; ++r) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[n * ldx + g * K + k]) * wv[(g * R + r) * K + k];
        const float v = static_cast<float>(acc);
        ref[(n * G + g) * R + r] = c.round_bf16 ? round_bf16(v) : v;
        ref_max = std::fmax(ref_max, std::fabs(v));
      }

  DeviceBuffer dx, dw, ds, dy;
  gpuError_t e = upload(dx, x.data(), x.size() * 4);
  if (e == gpuSuccess) e = upload(dw, data.data(), data.size());
  if (e == gpuSuccess) e = upload(ds, scale.data(), scale.size());
  const std::size_t ybytes = static_cast<std::size_t>((N + 1) * ldy) * 4;  // one spare row
  if (e == gpuSuccess) e = gpuMalloc(&dy.p, ybytes);
  if (e != gpuSuccess) return fmt_err("device buffers", e);
  w.data = static_cast<const uint8_t*>(dw.p);
  w.scale = static_cast<const uint8_t*>(ds.p);

  k::LinearArgs a;
  a.y = static_cast<float*>(dy.p);
  a.ldy = ldy;
  a.x = static_cast<const float*>(dx.p);
  a.ldx = ldx;
  a.nrows = N;
  a.groups = G;
  a.R = R;
  a.K = K;
  a.round_bf16 = c.round_bf16;

  // Each kernel writes into a buffer of all-ones bytes (a NaN): an element it never writes, or
  // one it writes outside [N, G*R] (padding, spare row), shows.
  auto run = [&](Launcher fn, const char* which, std::vector<float>& out) -> std::string {
    gpuError_t err = gpuMemsetAsync(dy.p, 0xFF, ybytes, s);
    if (err == gpuSuccess) err = fn(a, w, s);
    if (err == gpuSuccess) err = gpuStreamSynchronize(s);
    out.resize(ybytes / 4);
    if (err == gpuSuccess) err = gpuMemcpy(out.data(), dy.p, ybytes, gpuMemcpyDeviceToHost);
    return err == gpuSuccess ? std::string() : fmt_err(which, err);
  };
  std::vector<float> yh, ys;
  if (std::string why = run(hw, "MFMA kernel", yh); !why.empty()) return why;
  if (std::string why = run(simt, "SIMT kernel", ys); !why.empty()) return why;

  // Relative max |difference| of `y` to the reference and to the SIMT result; empty when both are
  // within 1e-5 and `y` wrote nothing outside the output, else what went wrong.
  auto compare = [&](const std::vector<float>& y, const char* which) -> std::string {
    const double scale_ref = ref_max > 0 ? ref_max : 1.0;
    double worst = 0, worst_simt = 0;
    int64_t wn = 0, wr = 0;
    for (int64_t n = 0; n <= N; ++n)
      for (int64_t j = 0; j < ldy; ++j) {
        const float v = y[n * ldy + j];
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (n == N || j >= G * R) {
          if (bits != 0xFFFFFFFFu) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "%s wrote outside the output at row %lld, col %lld", which,
                          static_cast<long long>(n), static_cast<long long>(j));
            return buf;
          }
          continue;
        }
        const double d = std::fabs(static_cast<double>(v) - ref[n * G * R + j]);
        const double d_simt = std::fabs(static_cast<double>(v) - ys[n * ldy + j]);
        if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d, wn = n, wr = j;
        if (!(d_simt <= worst_simt)) worst_simt = std::isnan(d_simt) ? INFINITY : d_simt;
      }
    if (worst <= 1e-5 * scale_ref && worst_simt <= 1e-5 * scale_ref) return {};
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: max |diff| / max |ref| = %.3g against the exact reference (worst at row %lld, col "
                  "%lld: %.9g, expected %.9g), %.3g against the SIMT kernel",
                  which, worst / scale_ref, static_cast<long long>(wn), static_cast<long long>(wr),
                  static_cast<double>(y[wn * ldy + wr]), static_cast<double>(ref[wn * G * R + wr]),
                  worst_simt / scale_ref);
    return buf;
  };
  std::string why = compare(yh, "MFMA kernel");
  if (std::string simt_why = compare(ys, "SIMT kernel"); !simt_why.empty())  // the reference itself
    why += (why.empty() ? "" : "; ") + simt_why;
  return why;
}

// Empty when `hw` passes every case, else what failed (the first failure). Unused on CUDA.
[[maybe_unused]] std::string compare_paths(Launcher hw, Launcher simt, gpuStream_t s) {
  Rng rng{0x9E3779B9u};
  for (const CheckCase& c : kCases)
    if (std::string why = run_case(c, hw, simt, s, rng); !why.empty()) return std::string(c.name) + ": " + why;
  return {};
}

}  // namespace

bool GpuBackend::mma_matrix_ok() {
#ifdef PLUMB_HIP
  if (mma_matrix_state_ == 0) {
    // An earlier op's fault is not the check's: leave it to the launch check of this op.
    if (gpuStreamSynchronize(stream_) != gpuSuccess) return false;
    const std::string why = compare_paths(&k::linear_mma, &k::linear_mma_simt, stream_);
    (void)gpuGetLastError();  // a launch error of the check is reported here, not by the next op
    mma_matrix_state_ = why.empty() ? 1 : -1;
    if (!why.empty())
      std::fprintf(stderr,
                   "plumb: warning: the bf16 MFMA GEMM failed its self-check on %s (%s); linear() uses the "
                   "SIMT bf16 GEMM from now on (same numerics, slower)\n",
                   info_.arch.c_str(), why.c_str());
  }
  return mma_matrix_state_ > 0;
#else
  return true;
#endif
}

}  // namespace plumb::gpu
