// The GPU runtime and driver version numbers as text, in each platform's own encoding. plumb
// doctor and GpuBackend::facts() (the `backend facts` of logits, verify and serve) both use it,
// so a HIP build never shows its numbers decoded as CUDA's.
#include "plumb/backend/device_facts.h"

#include <gtest/gtest.h>

namespace plumb::backend {
namespace {

TEST(GpuVersionText, CudaIsMajorThousandsMinorTens) {
  EXPECT_EQ(gpu_version_text("cuda", 12040), "12.4");
  EXPECT_EQ(gpu_version_text("cuda", 13000), "13.0");
  EXPECT_EQ(gpu_version_text("cuda", 12090), "12.9");
}

TEST(GpuVersionText, HipIsMajorTenMillionsMinorHundredThousandsPatch) {
  // ROCm 6.3's hipRuntimeGetVersion: 60342134; read as CUDA's it would say "60342.13".
  EXPECT_EQ(gpu_version_text("hip", 60342134), "6.3.42134");
  EXPECT_EQ(gpu_version_text("hip", 50221151), "5.2.21151");
}

TEST(GpuVersionText, UnknownIsEmpty) {
  EXPECT_EQ(gpu_version_text("cuda", 0), "");
  EXPECT_EQ(gpu_version_text("hip", -1), "");
}

}  // namespace
}  // namespace plumb::backend
