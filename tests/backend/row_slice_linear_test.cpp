// row_slice (format/weight_view.h), as tensor parallelism uses it: a linear over rows [b, b + c)
// of a weight is bitwise columns [b, b + c) of the linear over the whole weight, in every
// storage format, grouped too (wo_a); an FP8 slice that cuts a scale block is refused.
#include <cstring>

#include "op_test_util.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using backend::Tensor;
using test::host;

class RowSlice : public test::CpuOpTest<2026> {
 protected:
  void expect_slice_is_columns(const WeightView& w, int64_t begin, int64_t count, int64_t groups = 1) {
    const int64_t N = 5, K = w.cols() * groups;
    const Tensor x = upload(test::randn(rng, N * K), {N, K});
    const std::vector<float> full = host(*be, be->linear(x, w, {groups}));
    // A grouped slice takes its groups' inputs: group g of the slice is group begin/R + g.
    const int64_t R = w.rows() / groups, g0 = begin / R, gs = groups > 1 ? count / R : 1;
    const Tensor xs = groups > 1 ? be->columns(x, g0 * w.cols(), gs * w.cols()) : x;
    const std::vector<float> part = host(*be, be->linear(xs, row_slice(w, begin, count), {gs}));
    const int64_t rows = w.rows();
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(std::memcmp(&part[n * count], &full[n * rows + begin], count * sizeof(float)), 0)
          << w.name << " row " << n;
  }
};

TEST_F(RowSlice, LinearOverASliceIsBitwiseTheFullLinearsColumns) {
  const auto f32 = test::f32_weight({384, 96}, test::randn(rng, 384 * 96));
  const auto bf16 = test::bf16_weight({384, 96}, test::randn(rng, 384 * 96));
  const auto fp8 = test::fp8_weight(384, 200, test::randn(rng, 384 * 200));
  const auto fp4 = test::fp4_weight(384, 64, test::randn(rng, 384 * 64));
  for (const test::OwnedWeight* w : {&f32, &bf16, &fp8, &fp4}) {
    expect_slice_is_columns(w->view(), 128, 256);
    expect_slice_is_columns(w->view(), 256, 128);
    expect_slice_is_columns(w->view(), 0, 384);
  }
  expect_slice_is_columns(f32.view(), 37, 11);  // dense rows slice anywhere
  expect_slice_is_columns(fp8.view(), 128, 256, 3);  // grouped: groups of 128 rows, the last two
}

TEST_F(RowSlice, BadSlicesAreClearErrors) {
  const auto fp8 = test::fp8_weight(384, 200, test::randn(rng, 384 * 200));
  try {
    row_slice(fp8.view(), 64, 128);
    FAIL() << "a slice through a scale block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut a 128-row FP8 scale block"), std::string::npos) << e.what();
  }
  EXPECT_THROW(row_slice(fp8.view(), 256, 256), Error);  // past the end
}

}  // namespace
}  // namespace plumb
