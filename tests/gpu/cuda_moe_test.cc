// The mixture-of-experts ops of kernels/cuda/moe.cu against CPU versions (docs/architecture.md,
// rule 4), each alone and as the whole pipeline:
//   moe_router_logits: fp32 sums of bf16 x and the fp32 router, against double sums on the host
//     (rtol 1e-5: only the summation order differs);
//   moe_route: against cpu::moe_route on the same logits: the same experts, probs and weights
//     within a few ulp (expf vs std::exp), ties to the lower index;
//   moe_permute: the stable sort by expert, exactly;
//   moe_grouped_gemm: against double products of the same bf16 values (gather included), fp32
//     sums: rtol 1e-4; experts with no rows and rows of one expert spanning several tiles;
//   moe_combine: h += the weighted rows in slot order, against the host's fp32 (rtol 1e-5);
//   the pipeline: against the same computation on the host with bf16-rounded operands.
// Label "gpu": every test skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace yoco {
namespace {

std::vector<int32_t> random_experts(int rows, int k, int E, uint32_t seed, bool skewed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(rows) * k);
  for (int r = 0; r < rows; ++r) {
    std::vector<int> all(E);
    std::iota(all.begin(), all.end(), 0);
    if (skewed) {  // most rows choose among the first few experts: tiles spanning many rows
      std::shuffle(all.begin(), all.begin() + std::min(E, k + 2), g);
    } else {
      std::shuffle(all.begin(), all.end(), g);
    }
    for (int j = 0; j < k; ++j) ids[static_cast<size_t>(r) * k + j] = all[j];
  }
  return ids;
}

TEST(CudaMoe, RouterLogitsMatchDoubleSums) {
  SKIP_WITHOUT_GPU();
  for (const auto& [rows, dim, E] : std::vector<std::tuple<int, int, int>>{{1, 64, 8}, {5, 2560, 64}, {37, 96, 300}}) {
    const auto x = bf16_round(random_vec(static_cast<size_t>(rows) * dim, rows));
    const auto router = random_vec(static_cast<size_t>(E) * dim, dim);
    DeviceBuf<uint16_t> dx(to_bf16(x));
    DeviceBuf<float> dr(router), dl(static_cast<size_t>(rows) * E);
    ASSERT_OK(cuda::moe_router_logits(dx.get(), dr.get(), rows, dim, E, dl.get(), nullptr));
    std::vector<float> want(static_cast<size_t>(rows) * E);
    for (int r = 0; r < rows; ++r)
      for (int e = 0; e < E; ++e) {
        double s = 0;
        for (int i = 0; i < dim; ++i) s += static_cast<double>(x[r * dim + i]) * router[e * dim + i];
        want[r * E + e] = static_cast<float>(s);
      }
    EXPECT_TRUE(all_close(dl.host(), want, 1e-5f * std::sqrt(static_cast<float>(dim)), 1e-5f)) << rows << " " << dim;
  }
}

TEST(CudaMoe, RouteMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [rows, E, k, norm] :
       std::vector<std::tuple<int, int, int, bool>>{{1, 8, 2, false}, {50, 64, 8, true}, {7, 300, 5, false}}) {
    auto logits = random_vec(static_cast<size_t>(rows) * E, E + k, -4.f, 4.f);
    logits[1] = logits[2] = logits[4] = 10.f;  // a three-way tie in row 0: the lower indices win
    std::vector<float> probs(logits.size()), w(static_cast<size_t>(rows) * k);
    std::vector<int32_t> ids(w.size());
    cpu::moe_route(logits.data(), rows, E, k, norm, probs.data(), ids.data(), w.data());
    DeviceBuf<float> dl(logits), dp(probs.size()), dw(w.size()), dif(w.size());
    DeviceBuf<int32_t> di(ids.size());
    cuda::MoeRouteArgs a;
    a.logits = dl.get();
    a.rows = rows;
    a.n_experts = E;
    a.k = k;
    a.norm_topk = norm;
    a.probs = dp.get();
    a.experts = di.get();
    a.experts_f = dif.get();
    a.weights = dw.get();
    ASSERT_OK(cuda::moe_route(a, nullptr));
    EXPECT_EQ(di.host(), ids);
    std::vector<float> ids_f(ids.begin(), ids.end());
    EXPECT_EQ(dif.host(), ids_f);
    EXPECT_TRUE(all_close(dp.host(), probs, 1e-7f, 1e-5f));
    EXPECT_TRUE(all_close(dw.host(), w, 1e-7f, 1e-5f));
  }
  cuda::MoeRouteArgs bad;
  bad.n_experts = cuda::kMoeMaxExperts + 1;
  bad.k = 1;
  EXPECT_FALSE(cuda::moe_route(bad, nullptr).ok());
}

struct Sorted {
  std::vector<int32_t> offsets, tile_offsets, src_rows, slot_rows;
};

Sorted host_sort(const std::vector<int32_t>& ids, int rows, int k, int E) {
  Sorted s;
  s.offsets.assign(E + 1, 0);
  s.tile_offsets.assign(E + 1, 0);
  for (int32_t e : ids) ++s.offsets[e + 1];
  for (int e = 0; e < E; ++e) {
    s.tile_offsets[e + 1] = s.tile_offsets[e] + (s.offsets[e + 1] + cuda::kMoeTileRows - 1) / cuda::kMoeTileRows;
    s.offsets[e + 1] += s.offsets[e];
  }
  std::vector<int32_t> next(s.offsets.begin(), s.offsets.end() - 1);
  s.src_rows.resize(ids.size());
  s.slot_rows.resize(ids.size());
  for (size_t a = 0; a < ids.size(); ++a) {  // stable: assignments in order
    const int32_t pos = next[ids[a]]++;
    s.src_rows[pos] = static_cast<int32_t>(a / k);
    s.slot_rows[a] = pos;
  }
  (void)rows;
  return s;
}

Sorted device_sort(const std::vector<int32_t>& ids, int rows, int k, int E) {
  DeviceBuf<int32_t> di(ids), off(E + 1), toff(E + 1), src(ids.size()), slot(ids.size());
  cuda::MoePermuteArgs p;
  p.experts = di.get();
  p.rows = rows;
  p.k = k;
  p.n_experts = E;
  p.offsets = off.get();
  p.tile_offsets = toff.get();
  p.src_rows = src.get();
  p.slot_rows = slot.get();
  EXPECT_TRUE(cuda::moe_permute(p, nullptr).ok());
  return {off.host(), toff.host(), src.host(), slot.host()};
}

TEST(CudaMoe, PermuteIsTheStableSortByExpert) {
  SKIP_WITHOUT_GPU();
  for (const auto& [rows, k, E, skewed] : std::vector<std::tuple<int, int, int, bool>>{
           {1, 2, 8, false}, {3, 8, 64, false}, {512, 8, 64, false}, {700, 4, 16, true}, {2048, 8, 64, true}}) {
    const auto ids = random_experts(rows, k, E, rows + E, skewed);
    const Sorted want = host_sort(ids, rows, k, E), got = device_sort(ids, rows, k, E);
    EXPECT_EQ(got.offsets, want.offsets) << rows;
    EXPECT_EQ(got.tile_offsets, want.tile_offsets) << rows;
    EXPECT_EQ(got.src_rows, want.src_rows) << rows;
    EXPECT_EQ(got.slot_rows, want.slot_rows) << rows;
  }
}

// c[i] = a[src(i)] · W_eᵀ on the host in double, over the bf16 values.
std::vector<float> host_grouped(const std::vector<float>& a, const std::vector<int32_t>* a_rows,
                                const std::vector<float>& w, const Sorted& s, int E, int n, int k) {
  std::vector<float> c(static_cast<size_t>(s.offsets[E]) * n);
  for (int e = 0; e < E; ++e)
    for (int i = s.offsets[e]; i < s.offsets[e + 1]; ++i) {
      const int src = a_rows ? (*a_rows)[i] : i;
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int p = 0; p < k; ++p)
          sum += static_cast<double>(a[static_cast<size_t>(src) * k + p]) * w[(static_cast<size_t>(e) * n + j) * k + p];
        c[static_cast<size_t>(i) * n + j] = static_cast<float>(sum);
      }
    }
  return c;
}

TEST(CudaMoe, GroupedGemmMatchesHostProducts) {
  SKIP_WITHOUT_GPU();
  // (rows, k slots, experts, n, k dim, skewed): decode sizes, a prefill chunk, one hot expert.
  for (const auto& [rows, slots, E, n, kd, skewed] :
       std::vector<std::tuple<int, int, int, int, int, bool>>{{1, 2, 8, 64, 64, false},
                                                              {4, 8, 64, 96, 136, false},
                                                              {300, 4, 16, 200, 64, true},
                                                              {128, 8, 64, 512, 256, false}}) {
    const auto ids = random_experts(rows, slots, E, 3 * rows, skewed);
    const Sorted s = host_sort(ids, rows, slots, E);
    const auto x = bf16_round(random_vec(static_cast<size_t>(rows) * kd, 1));
    const auto w = bf16_round(random_vec(static_cast<size_t>(E) * n * kd, 2));
    DeviceBuf<uint16_t> dx(to_bf16(x)), dw(to_bf16(w));
    DeviceBuf<int32_t> off(s.offsets), toff(s.tile_offsets), src(s.src_rows);
    DeviceBuf<float> dc(static_cast<size_t>(rows) * slots * n);
    cuda::MoeGemmArgs g;
    g.a = dx.get();
    g.a_rows = src.get();
    g.w = dw.get();
    g.w_stride = static_cast<int64_t>(n) * kd;
    g.c = dc.get();
    g.offsets = off.get();
    g.tile_offsets = toff.get();
    g.n_experts = E;
    g.total_rows = rows * slots;
    g.n = n;
    g.k = kd;
    ASSERT_OK(cuda::moe_grouped_gemm(g, nullptr));
    const auto want = host_grouped(x, &s.src_rows, w, s, E, n, kd);
    EXPECT_TRUE(all_close(dc.host(), want, 1e-4f, 1e-4f)) << rows << "x" << n << "x" << kd;
  }
  cuda::MoeGemmArgs bad;
  bad.n_experts = 4;
  bad.total_rows = 4;
  bad.n = 8;
  bad.k = 12;  // not a multiple of 8
  const auto st = cuda::moe_grouped_gemm(bad, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("k must be a multiple of 8"), std::string::npos) << st.message();
}

TEST(CudaMoe, CombineAddsTheWeightedRowsInSlotOrder) {
  SKIP_WITHOUT_GPU();
  const int rows = 33, k = 3, E = 8, dim = 70;
  const auto ids = random_experts(rows, k, E, 4, false);
  const Sorted s = host_sort(ids, rows, k, E);
  const auto y = random_vec(static_cast<size_t>(rows) * k * dim, 5);
  const auto w = random_vec(static_cast<size_t>(rows) * k, 6, 0.f, 1.f);
  auto h = random_vec(static_cast<size_t>(rows) * dim, 7);
  DeviceBuf<float> dy(y), dw(w), dh(h);
  DeviceBuf<int32_t> slot(s.slot_rows);
  ASSERT_OK(cuda::moe_combine(dy.get(), slot.get(), dw.get(), rows, k, dim, dh.get(), nullptr));
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < dim; ++d) {
      float sum = 0;
      for (int j = 0; j < k; ++j) sum += w[r * k + j] * y[static_cast<size_t>(s.slot_rows[r * k + j]) * dim + d];
      h[r * dim + d] += sum;
    }
  EXPECT_TRUE(all_close(dh.host(), h, 1e-6f, 1e-5f));
}

// The whole routed FFN on the device against the host with the same bf16 roundings: x and the
// experts' matrices bf16, the SwiGLU activation rounded to bf16 before fc2.
TEST(CudaMoe, PipelineMatchesHost) {
  SKIP_WITHOUT_GPU();
  const int rows = 40, dim = 64, E = 8, k = 2, he = 32;
  const auto x = bf16_round(random_vec(static_cast<size_t>(rows) * dim, 11));
  const auto router = random_vec(static_cast<size_t>(E) * dim, 12, -0.5f, 0.5f);
  const auto up = bf16_round(random_vec(static_cast<size_t>(E) * 2 * he * dim, 13, -0.2f, 0.2f));
  const auto down = bf16_round(random_vec(static_cast<size_t>(E) * dim * he, 14, -0.2f, 0.2f));
  DeviceBuf<uint16_t> dx(to_bf16(x)), dup(to_bf16(up)), ddown(to_bf16(down)), dact(static_cast<size_t>(rows) * k * he);
  DeviceBuf<float> drouter(router), dlogits(static_cast<size_t>(rows) * E), dprobs(static_cast<size_t>(rows) * E),
      dweights(static_cast<size_t>(rows) * k), du(static_cast<size_t>(rows) * k * 2 * he),
      dy(static_cast<size_t>(rows) * k * dim), dh(std::vector<float>(static_cast<size_t>(rows) * dim, 0.f));
  DeviceBuf<int32_t> dids(static_cast<size_t>(rows) * k), off(E + 1), toff(E + 1), src(rows * k), slot(rows * k);
  ASSERT_OK(cuda::moe_router_logits(dx.get(), drouter.get(), rows, dim, E, dlogits.get(), nullptr));
  cuda::MoeRouteArgs r;
  r.logits = dlogits.get();
  r.rows = rows;
  r.n_experts = E;
  r.k = k;
  r.probs = dprobs.get();
  r.experts = dids.get();
  r.weights = dweights.get();
  ASSERT_OK(cuda::moe_route(r, nullptr));
  cuda::MoePermuteArgs p{dids.get(), rows, k, E, off.get(), toff.get(), src.get(), slot.get()};
  ASSERT_OK(cuda::moe_permute(p, nullptr));
  cuda::MoeGemmArgs g{dx.get(),   src.get(), dup.get(), 2LL * he * dim, du.get(), off.get(),
                      toff.get(), E,         rows * k,  2 * he,         dim};
  ASSERT_OK(cuda::moe_grouped_gemm(g, nullptr));
  ASSERT_OK(cuda::silu_mul_to_bf16(du.get(), 2 * he, du.get() + he, 2 * he, dact.get(), he, rows * k, he, nullptr));
  cuda::MoeGemmArgs g2{dact.get(), nullptr,   ddown.get(), static_cast<int64_t>(dim) * he,
                       dy.get(),   off.get(), toff.get(),  E,
                       rows * k,   dim,       he};
  ASSERT_OK(cuda::moe_grouped_gemm(g2, nullptr));
  ASSERT_OK(cuda::moe_combine(dy.get(), slot.get(), dweights.get(), rows, k, dim, dh.get(), nullptr));

  // The host, from the device's own routing (the router is checked above).
  const auto ids = dids.host();
  const auto weights = dweights.host();
  std::vector<float> want(static_cast<size_t>(rows) * dim, 0.f);
  for (int row = 0; row < rows; ++row)
    for (int j = 0; j < k; ++j) {
      const int e = ids[row * k + j];
      std::vector<float> act(he);
      for (int i = 0; i < he; ++i) {
        double a = 0, b = 0;
        for (int q = 0; q < dim; ++q) {
          a += static_cast<double>(x[row * dim + q]) * up[(static_cast<size_t>(e) * 2 * he + i) * dim + q];
          b += static_cast<double>(x[row * dim + q]) * up[(static_cast<size_t>(e) * 2 * he + he + i) * dim + q];
        }
        act[i] = from_bf16(to_bf16(static_cast<float>(a / (1.0 + std::exp(-a)) * b)));
      }
      for (int d = 0; d < dim; ++d) {
        double s = 0;
        for (int i = 0; i < he; ++i)
          s += static_cast<double>(act[i]) * down[(static_cast<size_t>(e) * dim + d) * he + i];
        want[row * dim + d] += weights[row * k + j] * static_cast<float>(s);
      }
    }
  EXPECT_TRUE(bf16_close(dh.host(), want));
}

}  // namespace
}  // namespace yoco
