// The engine against the independent float64 reference (tests/reference/): log-probabilities
// at every position through both the full forward and prefill + decode steps, and the
// inference state itself (global K/V, retention S, window rows) after the whole sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "model/model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

constexpr double kLogprobTol = 1e-4;  // the bar: abs, on log-probabilities

struct Golden {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logprobs;
  Json state;
};

Golden load_golden(const std::string& name) {
  auto j = Json::parse(test::read_file(test::goldens_dir() + "/" + name + "/golden.json"));
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  Golden g;
  for (const auto& t : j.value().find("tokens")->as_array()) g.tokens.push_back(static_cast<int32_t>(t.as_int()));
  for (const auto& row : j.value().find("logprobs")->as_array()) g.logprobs.push_back(test::flatten(row));
  g.state = *j.value().find("state");
  return g;
}

double compare_state_part(const std::vector<double>& want, const float* got, size_t n, const char* what) {
  EXPECT_EQ(want.size(), n) << what;
  // docs/architecture.md, rule 4: |x − ref| ≤ atol + rtol·|ref|, with atol scaled to the tensor's magnitude.
  // Returns the worst ratio of the error to that bound (≤ 1 passes).
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double atol = 1e-5 * scale, rtol = 1e-4;
  double worst = 0, worst_abs = 0;
  for (size_t i = 0; i < std::min(n, want.size()); ++i) {
    const double err = std::fabs(want[i] - got[i]);
    worst_abs = std::max(worst_abs, err);
    worst = std::max(worst, err / (atol + rtol * std::fabs(want[i])));
  }
  std::printf("  %-9s max|ref| %.3e  max|err| %.3e  worst/bound %.3f\n", what, scale, worst_abs, worst);
  return worst;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, FullForwardMatchesReference) {
  const Golden g = load_golden(GetParam());
  auto m = Model::load(test::goldens_dir() + "/" + GetParam());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int V = (*m)->config().vocab_size;
  for (int chunk : {1, 5, 512}) {  // chunk boundaries must not matter
    PrefillOptions opt;
    opt.chunk_tokens = chunk;
    opt.retention_chunk = 4;
    double worst = 0;
    ASSERT_TRUE((*m)->forward(
                        g.tokens,
                        [&](int64_t pos0, int rows, const float* logits) {
                          std::vector<float> row(V);
                          for (int r = 0; r < rows; ++r) {
                            std::memcpy(row.data(), logits + static_cast<size_t>(r) * V, V * 4);
                            cpu::log_softmax(row.data(), V);
                            for (int i = 0; i < V; ++i)
                              worst = std::max(worst, std::fabs(row[i] - g.logprobs[pos0 + r][i]));
                          }
                        },
                        opt)
                    .ok());
    EXPECT_LT(worst, kLogprobTol) << "chunk_tokens=" << chunk;
  }
}

TEST_P(GoldenTest, PrefillThenDecodeStepsMatchReference) {
  const Golden g = load_golden(GetParam());
  auto m = Model::load(test::goldens_dir() + "/" + GetParam());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Model& model = **m;
  const int V = model.config().vocab_size;
  // Prefill the first 3 tokens, then feed the rest one decode step at a time.
  SequenceState st = model.new_sequence();
  SequenceState* one[1] = {&st};
  std::vector<float> logits(V);
  const size_t n0 = 3;
  ASSERT_TRUE(model.prefill(st, std::span(g.tokens).first(n0)).ok());
  ASSERT_TRUE(model.logits(one, logits.data()).ok());
  double worst = 0;
  for (size_t p = n0 - 1; p < g.tokens.size(); ++p) {
    if (p >= n0) {
      const int32_t tok[1] = {g.tokens[p]};
      ASSERT_TRUE(model.decode_step(one, tok, logits.data()).ok());
    }
    cpu::log_softmax(logits.data(), V);
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(logits[i] - g.logprobs[p][i]));
  }
  EXPECT_LT(worst, kLogprobTol);
}

TEST_P(GoldenTest, StateMatchesReference) {
  const Golden g = load_golden(GetParam());
  auto m = Model::load(test::goldens_dir() + "/" + GetParam());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Model& model = **m;
  const ModelConfig& c = model.config();
  SequenceState st = model.new_sequence();
  PrefillOptions opt;
  opt.chunk_tokens = 8;
  opt.retention_chunk = 3;
  ASSERT_TRUE(model.prefill(st, g.tokens, opt).ok());
  EXPECT_EQ(st.position, g.state.find("position")->as_int());
  // The state is what gets shipped and stored, so it is checked directly, not only via logits.
  constexpr double kStateTol = 1.0;
  if (c.is_transformer()) {  // every layer's K/V rows (layout in model/state.h)
    for (const char* key : {"layer_k", "layer_v"}) {
      const auto& layers = g.state.find(key)->as_array();
      ASSERT_EQ(layers.size(), static_cast<size_t>(c.n_layers));
      for (int l = 0; l < c.n_layers; ++l) {
        std::vector<float> rows;
        for (int64_t r = 0; r < st.position; ++r) {
          const float* p = key[6] == 'k' ? st.layer_k_row(r, l, c.n_layers, c.kv_dim())
                                         : st.layer_v_row(r, l, c.n_layers, c.kv_dim());
          rows.insert(rows.end(), p, p + c.kv_dim());
        }
        EXPECT_LT(compare_state_part(test::flatten(layers[l]), rows.data(), rows.size(), key), kStateTol)
            << "layer " << l;
      }
    }
    return;
  }
  EXPECT_LT(compare_state_part(test::flatten(*g.state.find("global_k")), st.k.data(), st.k.size(), "global_k"),
            kStateTol);
  EXPECT_LT(compare_state_part(test::flatten(*g.state.find("global_v")), st.v.data(), st.v.size(), "global_v"),
            kStateTol);
  const auto& self = g.state.find("self")->as_array();
  ASSERT_EQ(self.size(), st.self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    EXPECT_EQ(self[i].find("loop")->as_int(), static_cast<int64_t>(i) / c.n_self_layers);
    EXPECT_EQ(self[i].find("layer")->as_int(), static_cast<int64_t>(i) % c.n_self_layers);
    const SelfLayerState& s = st.self[i];
    if (!c.is_swa()) {
      EXPECT_LT(compare_state_part(test::flatten(*self[i].find("S")), s.s.data(), s.s.size(), "S"), kStateTol) << i;
      continue;
    }
    // Window rows, oldest first: the last min(n, W−1) of the ring.
    const int keep = std::min<int>(s.count, c.sliding_window - 1);
    std::vector<float> k_rows, v_rows;
    for (int r = s.count - keep; r < s.count; ++r) {
      const float* kr = s.k.data() + static_cast<size_t>(s.ring_index(r)) * c.dim;
      const float* vr = s.v.data() + static_cast<size_t>(s.ring_index(r)) * c.dim;
      k_rows.insert(k_rows.end(), kr, kr + c.dim);
      v_rows.insert(v_rows.end(), vr, vr + c.dim);
    }
    EXPECT_LT(compare_state_part(test::flatten(*self[i].find("k")), k_rows.data(), k_rows.size(), "k"), kStateTol) << i;
    EXPECT_LT(compare_state_part(test::flatten(*self[i].find("v")), v_rows.data(), v_rows.size(), "v"), kStateTol) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GoldenTest,
                         ::testing::Values("gret_tied", "gret_gqa3_untied", "swa_w8", "yocou_swa_t3_nope",
                                           "yocou_gret_t3", "gret_selflayers3", "transformer_gqa3", "moe_gret_shared",
                                           "moe_yocou_swa_t3_nope", "moe_swa_k1_shared_norm"));

}  // namespace
}  // namespace yoco
