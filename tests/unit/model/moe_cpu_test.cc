// model/moe_cpu.*: the routing of docs/design.md §2.2 (softmax over every expert, top-k with ties
// to the lower index, optional renormalisation) and the grouped experts (tokens grouped by expert,
// one product per expert) against the plain per-token, per-expert version, in fp32 and bf16.
#include "model/moe_cpu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/ops.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

TEST(MoeRoute, SoftmaxOverAllExpertsTopKTiesToTheLowerIndex) {
  // Experts 1, 2 and 4 tie for the largest logit; 0 is next.
  const float logits[] = {2.0f, 3.0f, 3.0f, -1.0f, 3.0f};
  float probs[5], w[2];
  int32_t ids[2];
  cpu::moe_route(logits, 1, 5, 2, /*norm_topk=*/false, probs, ids, w);
  double sum = 0, z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  for (int e = 0; e < 5; ++e) {
    sum += probs[e];
    EXPECT_NEAR(probs[e], std::exp(static_cast<double>(logits[e])) / z, 1e-7) << e;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(w[0], probs[1]);
  EXPECT_EQ(w[1], probs[2]);
  cpu::moe_route(logits, 1, 5, 2, /*norm_topk=*/true, probs, ids, w);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  // k = E: every expert, best first, ties in index order; renormalised weights sum to 1.
  int32_t all[5];
  float wa[5];
  cpu::moe_route(logits, 1, 5, 5, true, probs, all, wa);
  const int32_t want[] = {1, 2, 4, 0, 3};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(all[j], want[j]) << j;
  EXPECT_NEAR(wa[0] + wa[1] + wa[2] + wa[3] + wa[4], 1.0, 1e-6);
}

TEST(MoeRoute, ManyExpertsAndRows) {
  const int rows = 50, E = 300, k = 7;  // E past the bitmask's 256
  const auto logits = test::randn(static_cast<size_t>(rows) * E, 5, 2.0f);
  std::vector<float> probs(rows * E), w(rows * k);
  std::vector<int32_t> ids(rows * k);
  cpu::moe_route(logits.data(), rows, E, k, false, probs.data(), ids.data(), w.data());
  for (int r = 0; r < rows; ++r) {
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    const float* p = &probs[static_cast<size_t>(r) * E];
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids[r * k + j], order[j]) << r << " " << j;
      EXPECT_EQ(w[r * k + j], p[order[j]]);
    }
  }
}

class MoeExperts : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig c = find_preset("tiny-moe-gret").value();
    c.n_experts = 16;
    c.n_experts_per_token = 4;
    c.expert_hidden_dim = 48;
    ASSERT_TRUE(write_random_model(dir_.path(), c, 3, DType::kBF16).ok());
  }
  std::unique_ptr<Model> load() {
    auto m = Model::load(dir_.path());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  // Routes `rows` random inputs through layer 0's router and runs both versions.
  void run(const Model& m, int rows, uint32_t seed, std::vector<float>& grouped, std::vector<float>& plain) {
    const ModelConfig& c = m.config();
    const MoeWeights& w = m.weights().self_layers[0].moe;
    const int D = c.dim, E = c.n_experts, k = c.n_experts_per_token;
    const auto x = test::randn(static_cast<size_t>(rows) * D, seed);
    std::vector<float> logits(rows * E), probs(rows * E), weights(rows * k);
    std::vector<int32_t> ids(rows * k);
    cpu_linear(x, w.router, logits, rows, E, D);
    cpu::moe_route(logits.data(), rows, E, k, false, probs.data(), ids.data(), weights.data());
    grouped.assign(static_cast<size_t>(rows) * D, NAN);
    plain.assign(grouped.size(), NAN);
    MoeCpu::grouped(m, w, c.expert_hidden_dim, x.data(), rows, k, ids.data(), weights.data(), grouped.data());
    MoeCpu::reference(m, w, c.expert_hidden_dim, x.data(), rows, k, ids.data(), weights.data(), plain.data());
  }
  static void cpu_linear(const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& y, int m, int n,
                         int k) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float s = 0;
        for (int p = 0; p < k; ++p) s += x[i * k + p] * w[j * k + p];
        y[i * n + j] = s;
      }
  }
  static double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
    return m;
  }
  test::TempDir dir_;
};

// Decode sizes (at most 16 rows) run the same small-m kernel per output whatever the rows, so the
// grouped version gives the plain one's bits; prefill sizes go through the library GEMM.
TEST_F(MoeExperts, GroupedEqualsPlainInFp32) {
  auto m = load();
  ASSERT_TRUE(m);
  for (int rows : {1, 3, 16, 40, 300}) {
    std::vector<float> g, p;
    run(*m, rows, 10 + rows, g, p);
    const double d = test::max_abs_diff(g.data(), p.data(), g.size()), scale = max_abs(p);
    std::printf("rows %3d: max|ref| %.3e max|diff| %.3e\n", rows, scale, d);
    ASSERT_GT(scale, 0);
    if (rows <= 16) {
      EXPECT_EQ(0, std::memcmp(g.data(), p.data(), g.size() * 4)) << rows;
    }
    EXPECT_LE(d, 1e-5 * scale) << rows;
  }
}

TEST_F(MoeExperts, ThreadCountDoesNotChangeTheResult) {
  auto m = load();
  ASSERT_TRUE(m);
  // One row: fewer experts than 8 threads, so each product is threaded instead of the experts.
  for (int rows : {1, 2, 300}) {
    std::vector<float> g1, g8, p;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    run(*m, rows, 7, g1, p);
    omp_set_num_threads(8);
    run(*m, rows, 7, g8, p);
    omp_set_num_threads(saved);
    EXPECT_EQ(0, std::memcmp(g1.data(), g8.data(), g1.size() * 4)) << rows;
  }
}

// bf16 weights: products of 8 rows and more round x to bf16 (docs/design.md §2.5), the plain
// version's single rows do not, so the two agree to bf16's precision of x.
TEST_F(MoeExperts, GroupedNearPlainInBf16) {
  auto m = load();
  ASSERT_TRUE(m);
  m->use_bf16_weights();
  for (int rows : {1, 5, 64, 300}) {
    std::vector<float> g, p;
    run(*m, rows, 20 + rows, g, p);
    const double d = test::max_abs_diff(g.data(), p.data(), g.size()), scale = max_abs(p);
    std::printf("bf16 rows %3d: max|ref| %.3e max|diff| %.3e\n", rows, scale, d);
    EXPECT_LE(d, 2e-2 * scale) << rows;
  }
}

}  // namespace
}  // namespace yoco
