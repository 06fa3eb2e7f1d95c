// The GPU engine's glue ops (kernels/cuda/engine_ops.cu) against CPU versions (docs/architecture.md, rule 4):
//   rmsnorm_to_bf16, silu_mul_to_bf16: the fp32 CPU op, then one bf16 rounding: the GPU's fp32
//     value is a few ulp from the CPU's, which can move the rounding by one bf16 ulp (2^-7
//     relative at most), so rtol 1e-2 and a tiny atol;
//   convert_to_bf16: bitwise equal to the host's round-to-nearest-even;
//   copy_rows, kv_append_paged: exact copies, every other element untouched (outputs poisoned
//     with NaN first);
//   fill_normal: reproducible, bf16 = the rounding of the fp32 values, moments of N(mean, sd²).
// Label "gpu": every test skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace yoco {
namespace {

TEST(CudaEngineOps, RmsnormToBf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int shapes[][2] = {{1, 1}, {3, 7}, {17, 64}, {5, 1000}, {2, 3072}};
  uint32_t seed = 10;
  for (const auto& sh : shapes) {
    const int rows = sh[0], dim = sh[1];
    SCOPED_TRACE("rows=" + std::to_string(rows) + " dim=" + std::to_string(dim));
    const auto x = random_vec(static_cast<size_t>(rows) * dim, seed++, -3.f, 3.f);
    const auto w = random_vec(dim, seed++, 0.5f, 1.5f);
    for (const bool with_w : {true, false}) {
      std::vector<float> ref(x.size());
      cpu::rmsnorm(x.data(), dim, with_w ? w.data() : nullptr, ref.data(), dim, rows, dim, 1e-5f);
      DeviceBuf<float> dx(x), dw(w);
      DeviceBuf<uint16_t> dy(std::vector<uint16_t>(x.size(), 0x7fc0));  // NaN
      ASSERT_OK(cuda::rmsnorm_to_bf16(dx.get(), with_w ? dw.get() : nullptr, dy.get(), rows, dim, 1e-5f, nullptr));
      EXPECT_TRUE(all_close(from_bf16(dy.host()), ref, 1e-6f, 1e-2f));
    }
  }
  EXPECT_EQ(cuda::rmsnorm_to_bf16(nullptr, nullptr, nullptr, 2, 0, 1e-5f, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::rmsnorm_to_bf16(nullptr, nullptr, nullptr, 2, 4, 1e-5f, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

TEST(CudaEngineOps, SiluMulToBf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int shapes[][2] = {{1, 1}, {3, 5}, {9, 160}, {4, 1537}};
  uint32_t seed = 100;
  for (const auto& sh : shapes) {
    const int rows = sh[0], H = sh[1];
    SCOPED_TRACE("rows=" + std::to_string(rows) + " hidden=" + std::to_string(H));
    const auto u = random_vec(static_cast<size_t>(rows) * 2 * H, seed++, -6.f, 6.f);
    std::vector<float> ref(static_cast<size_t>(rows) * H);
    cpu::silu_mul(u.data(), 2 * H, u.data() + H, 2 * H, ref.data(), H, rows, H);
    DeviceBuf<float> du(u);
    // Output with a wider stride: the gaps must stay poisoned.
    const int ldo = H + 3;
    DeviceBuf<uint16_t> dout(std::vector<uint16_t>(static_cast<size_t>(rows) * ldo, 0x7fc0));
    ASSERT_OK(cuda::silu_mul_to_bf16(du.get(), 2 * H, du.get() + H, 2 * H, dout.get(), ldo, rows, H, nullptr));
    const auto got = from_bf16(dout.host());
    std::vector<float> packed(ref.size());
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < H; ++c) packed[static_cast<size_t>(r) * H + c] = got[static_cast<size_t>(r) * ldo + c];
      for (int c = H; c < ldo; ++c) EXPECT_TRUE(std::isnan(got[static_cast<size_t>(r) * ldo + c]));
    }
    EXPECT_TRUE(all_close(packed, ref, 1e-6f, 1e-2f));
  }
  EXPECT_EQ(cuda::silu_mul_to_bf16(nullptr, 1, nullptr, 1, nullptr, 1, 1, 2, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

TEST(CudaEngineOps, ConvertToBf16RoundsToNearestEven) {
  SKIP_WITHOUT_GPU();
  const int rows = 7, cols = 333, ldx = 340, ldy = 336;
  auto x = random_vec(static_cast<size_t>(rows) * ldx, 200, -100.f, 100.f);
  // Exact ties and specials.
  x[0] = 1.0f + 1.0f / 256;  // halfway between two bf16 values: rounds to even
  x[1] = 1.0f + 3.0f / 256;
  x[2] = -0.0f;
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 3.4e38f;  // rounds to infinity in bf16
  x[5] = 1e-40f;   // subnormal
  DeviceBuf<float> dx(x);
  DeviceBuf<uint16_t> dy(std::vector<uint16_t>(static_cast<size_t>(rows) * ldy, 0x7fc1));
  ASSERT_OK(cuda::convert_to_bf16(dx.get(), ldx, dy.get(), ldy, rows, cols, nullptr));
  const auto got = dy.host();
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(got[static_cast<size_t>(r) * ldy + c], to_bf16(x[static_cast<size_t>(r) * ldx + c]))
          << "row " << r << " col " << c;
    for (int c = cols; c < ldy; ++c) ASSERT_EQ(got[static_cast<size_t>(r) * ldy + c], 0x7fc1);
  }
  EXPECT_EQ(cuda::convert_to_bf16(dx.get(), 3, dy.get(), ldy, rows, cols, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

TEST(CudaEngineOps, CopyRowsGathersAndScatters) {
  SKIP_WITHOUT_GPU();
  const int src_rows = 9, dst_rows = 11, cols = 77, lds = 80, ldd = 79;
  const auto src = random_vec(static_cast<size_t>(src_rows) * lds, 300);
  const std::vector<int32_t> from = {4, 0, 8, 4};  // a gather may repeat a source row
  const std::vector<int32_t> to = {10, 3, 0, 5};
  const int n = static_cast<int>(from.size());
  DeviceBuf<float> dsrc(src);
  DeviceBuf<int32_t> dfrom(from), dto(to);
  for (int mode = 0; mode < 3; ++mode) {  // gather+scatter, gather only, scatter only
    SCOPED_TRACE("mode " + std::to_string(mode));
    DeviceBuf<float> ddst(std::vector<float>(static_cast<size_t>(dst_rows) * ldd, kNaN));
    const int32_t* fs = mode == 2 ? nullptr : dfrom.get();
    const int32_t* ts = mode == 1 ? nullptr : dto.get();
    ASSERT_OK(cuda::copy_rows(dsrc.get(), lds, fs, ddst.get(), ldd, ts, n, cols, nullptr));
    std::vector<float> want(static_cast<size_t>(dst_rows) * ldd, kNaN);
    for (int r = 0; r < n; ++r) {
      const int s = fs ? from[r] : r, d = ts ? to[r] : r;
      for (int c = 0; c < cols; ++c) want[static_cast<size_t>(d) * ldd + c] = src[static_cast<size_t>(s) * lds + c];
    }
    const auto got = ddst.host();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(same_bits(got[i], want[i]) || (std::isnan(got[i]) && std::isnan(want[i]))) << "element " << i;
  }
}

TEST(CudaEngineOps, KvAppendPagedWritesEachRowToItsBlock) {
  SKIP_WITHOUT_GPU();
  const int n_blocks = 6, bs = 4, kv_dim = 10, max_blocks = 3, ld = 2 * kv_dim + 1;
  // Two sequences: table 0 = blocks {5, 1, 3}, table 1 = blocks {0, 2, 4}.
  const std::vector<int32_t> tables = {5, 1, 3, 0, 2, 4};
  // Rows: prefill-like (table 0, consecutive positions 3..6) then decode-like rows of table 1,
  // then one row past the table (position 12 = slot 3) that must be skipped.
  const std::vector<int32_t> row_tables = {0, 0, 0, 0, 1, 1, 1};
  const std::vector<int64_t> positions = {3, 4, 5, 6, 0, 11, 12};
  const int rows = static_cast<int>(positions.size());
  const auto kv = random_vec(static_cast<size_t>(rows) * ld, 400);  // k then v in each row, as the engine's k|v product
  const size_t pool = static_cast<size_t>(n_blocks) * bs * kv_dim;
  DeviceBuf<float> dkv(kv), dk(std::vector<float>(pool, kNaN)), dv(std::vector<float>(pool, kNaN));
  DeviceBuf<int32_t> dtables(tables), drt(row_tables);
  DeviceBuf<int64_t> dpos(positions);
  cuda::KvAppendArgs a;
  a.k = dkv.get();
  a.ldk = ld;
  a.v = dkv.get() + kv_dim;
  a.ldv = ld;
  a.k_pool = dk.get();
  a.v_pool = dv.get();
  a.block_tables = dtables.get();
  a.max_blocks = max_blocks;
  a.row_tables = drt.get();
  a.positions = dpos.get();
  a.rows = rows;
  a.kv_dim = kv_dim;
  a.block_size = bs;
  a.n_blocks = n_blocks;
  ASSERT_OK(cuda::kv_append_paged(a, nullptr));
  std::vector<float> want_k(pool, kNaN), want_v(pool, kNaN);
  for (int r = 0; r < rows; ++r) {
    const int64_t p = positions[r];
    if (p / bs >= max_blocks) continue;
    const int32_t block = tables[static_cast<size_t>(row_tables[r]) * max_blocks + p / bs];
    for (int c = 0; c < kv_dim; ++c) {
      want_k[(static_cast<size_t>(block) * bs + p % bs) * kv_dim + c] = kv[static_cast<size_t>(r) * ld + c];
      want_v[(static_cast<size_t>(block) * bs + p % bs) * kv_dim + c] = kv[static_cast<size_t>(r) * ld + kv_dim + c];
    }
  }
  const auto got_k = dk.host(), got_v = dv.host();
  for (size_t i = 0; i < pool; ++i) {
    ASSERT_TRUE(same_bits(got_k[i], want_k[i]) || (std::isnan(got_k[i]) && std::isnan(want_k[i]))) << "K " << i;
    ASSERT_TRUE(same_bits(got_v[i], want_v[i]) || (std::isnan(got_v[i]) && std::isnan(want_v[i]))) << "V " << i;
  }
  // row_tables null: every row uses table 0.
  a.row_tables = nullptr;
  a.rows = 1;
  ASSERT_OK(cuda::kv_append_paged(a, nullptr));
  const auto k2 = dk.host();
  for (int c = 0; c < kv_dim; ++c) EXPECT_TRUE(same_bits(k2[(5 * bs + 3) * kv_dim + c], kv[c]));

  cuda::KvAppendArgs bad = a;
  bad.block_size = 0;
  EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  bad = a;
  bad.ldk = kv_dim - 1;
  EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  bad = a;
  bad.positions = nullptr;
  EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), cuda::StatusCode::kInvalidArgument);
}

TEST(CudaEngineOps, FillNormalIsReproducibleWithTheRightMoments) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1 << 20;
  const float mean = 0.25f, sd = 2.0f;
  DeviceBuf<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  DeviceBuf<uint16_t> c(static_cast<size_t>(n));
  ASSERT_OK(cuda::fill_normal(a.get(), cuda::DType::kF32, n, 7, mean, sd, nullptr));
  ASSERT_OK(cuda::fill_normal(b.get(), cuda::DType::kF32, n, 7, mean, sd, nullptr));
  ASSERT_OK(cuda::fill_normal(c.get(), cuda::DType::kBF16, n, 7, mean, sd, nullptr));
  const auto ha = a.host(), hb = b.host();
  const auto hc = c.host();
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(ha[i])) << i;
    ASSERT_TRUE(same_bits(ha[i], hb[i])) << i;
    ASSERT_EQ(hc[i], to_bf16(ha[i])) << i;
    s += ha[i];
    s2 += static_cast<double>(ha[i]) * ha[i];
  }
  const double m = s / n, var = s2 / n - m * m;
  EXPECT_NEAR(m, mean, 0.01);  // ~5 standard errors (sd / sqrt(n) = 0.002)
  EXPECT_NEAR(std::sqrt(var), sd, 0.01);
  // Another seed gives other values; a prefix does not depend on n (counter-based).
  DeviceBuf<float> d(1000);
  ASSERT_OK(cuda::fill_normal(d.get(), cuda::DType::kF32, 1000, 7, mean, sd, nullptr));
  const auto hd = d.host();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(same_bits(hd[i], ha[i])) << i;
  ASSERT_OK(cuda::fill_normal(d.get(), cuda::DType::kF32, 1000, 8, mean, sd, nullptr));
  const auto he = d.host();
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += same_bits(he[i], ha[i]);
  EXPECT_LT(same, 5);
  EXPECT_EQ(cuda::fill_normal(nullptr, cuda::DType::kF32, 4, 1, 0, 1, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoco
