// .npy reading: real headers in every spelling NumPy writes parse to the right shape and data;
// hostile headers (huge, padded, overflowing, negative) are refused with a message naming the
// file, and never crash (issue #19: a backtracking regex overflowed its stack on a 65 KB header).
#include "plumb/format/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../hardening/hostile_files.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

class NpyRead : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("plumb-npy-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_raw(const std::string& name, const std::string& header, const std::string& data, int major = 1) {
    test::write_bytes(dir_ / name, test::npy_bytes(header, data, major));
    return (dir_ / name).string();
  }

  std::string error_of(const std::string& path) {
    try {
      read_npy(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(NpyRead, RoundTripsRandomArraysOfSeveralShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{5}, {3, 4}, {2, 3, 5}, {1, 1, 7}, {0}, {}}) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = dist(rng);
    const std::string p = (dir_ / "a.npy").string();
    write_f32_npy(p, shape, v.data());
    const NpyArray a = read_npy(p);
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.dtype, DType::F32);
    ASSERT_EQ(a.data.size(), v.size() * 4);
    if (!v.empty()) {
      EXPECT_EQ(std::memcmp(a.data.data(), v.data(), a.data.size()), 0);
    }
  }
}

TEST_F(NpyRead, AcceptsEveryHeaderSpelling) {
  const std::string four(16, '\x01');
  // Key order, quote style, spacing, trailing commas and format versions 2 and 3 all occur in files.
  for (const auto& [header, major] : std::vector<std::pair<std::string, int>>{
           {"{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 1},
           {"{'shape': (2, 2), 'fortran_order': False, 'descr': '<i4'}", 1},
           {"{\"descr\":\"<i4\",\"fortran_order\":False,\"shape\":(4,)}", 2},
           {"{ 'descr' : '<i4' , 'fortran_order' : False , 'shape' : ( 1 , 4 , ) , }", 3}}) {
    const NpyArray a = read_npy(write_raw("h.npy", header, four, major));
    int64_t n = 1;
    for (int64_t d : a.shape) n *= d;
    EXPECT_EQ(n, 4) << header;
    EXPECT_EQ(a.dtype, DType::I32) << header;
  }
}

TEST_F(NpyRead, HugePaddedHeadersParseWithoutRecursion) {
  // 65 KB (format 1's limit) and 2 MB (format 2) of spaces inside the shape tuple: valid Python,
  // and the case that overflowed the regex engine's stack.
  for (const auto& [spaces, major] : {std::pair{std::size_t{65000}, 1}, std::pair{std::size_t{2} << 20, 2}}) {
    const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1," + std::string(spaces, ' ') + "), }";
    const NpyArray a = read_npy(write_raw("big.npy", header, std::string(4, '\0'), major));
    EXPECT_EQ(a.shape, std::vector<int64_t>{1});
  }
  const std::string header = "{'descr': '<f4', 'shape': (" + std::string(1 << 20, '(') + "), }";
  const std::string e = error_of(write_raw("nested.npy", header, "", 2));
  EXPECT_NE(e.find("malformed .npy header (expected a dimension"), std::string::npos) << e;
}

TEST_F(NpyRead, RefusesShapesThatOverflowOrAreNegative) {
  const auto with_shape = [&](const std::string& shape, const std::string& data = std::string(4, '\0')) {
    return error_of(write_raw("s.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", data));
  };
  // 2^62 + 1 elements of 4 bytes: the byte count overflows 64 bits (was signed overflow, UB).
  EXPECT_NE(with_shape("(4611686018427387905,)").find("more bytes than fit in 64 bits"), std::string::npos);
  EXPECT_NE(with_shape("(4294967296, 4294967296)").find("more elements than fit in 64 bits"), std::string::npos);
  EXPECT_NE(with_shape("(99999999999999999999,)").find("a dimension beyond int64"), std::string::npos);
  EXPECT_NE(with_shape("(-3,)").find("a negative dimension"), std::string::npos);
  EXPECT_NE(with_shape("(3,)").find("data is 4 bytes, expected 12"), std::string::npos);
}

TEST_F(NpyRead, RefusesMalformedHeadersByName) {
  const std::string d(4, '\0');
  const auto e = [&](const std::string& header) { return error_of(write_raw("m.npy", header, d)); };
  EXPECT_NE(e("{'fortran_order': False, 'shape': (1,), }").find("no 'descr'"), std::string::npos);
  EXPECT_NE(e("{'descr': '<f4', 'fortran_order': False, }").find("no 'shape'"), std::string::npos);
  EXPECT_NE(e("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }").find("Fortran-ordered"), std::string::npos);
  EXPECT_NE(e("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }").find("unsupported .npy dtype '>f4'"),
            std::string::npos);
  EXPECT_NE(e("{'descr': '<f4', 'descr': '<f4', 'shape': (1,), }").find("repeated key 'descr'"), std::string::npos);
  EXPECT_NE(e("{'descr': '<f4', 'shape': (1,), } junk").find("text after the closing"), std::string::npos);
  EXPECT_NE(e("{'descr': '<f4").find("malformed .npy header (unterminated string"), std::string::npos);
  EXPECT_NE(e("{'descr': '<f4', 'shape': (1 2), }").find("expected ')'"), std::string::npos);
  std::string many = "(";
  for (int i = 0; i < 33; ++i) many += "1,";
  many += ")";
  EXPECT_NE(e("{'descr': '<f4', 'shape': " + many + ", }").find("more than 32 dimensions"), std::string::npos);
}

TEST_F(NpyRead, RefusesFifosAndDevices) {
  const fs::path fifo = dir_ / "ids.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo.string()).find("is a FIFO"), std::string::npos);  // returns at once, no writer needed
  EXPECT_NE(error_of("/dev/zero").find("is a character device"), std::string::npos);
  EXPECT_NE(error_of(dir_.string()).find("is a directory"), std::string::npos);
}

}  // namespace
}  // namespace plumb
