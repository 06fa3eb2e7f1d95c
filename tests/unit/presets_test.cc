// Every make-random-model preset is a valid config, and the papers' sizes come out right.
#include <gtest/gtest.h>

#include "model/random_model.h"
#include "model/weights.h"

namespace yoco {
namespace {

int64_t parameter_count(const ModelConfig& c) {
  int64_t n = 0;
  for (const TensorSlot& s : model_tensor_slots(c, nullptr, WeightSet::kFull)) {
    if (s.optional && c.tie_embeddings.value_or(false)) continue;
    int64_t e = 1;
    for (auto d : s.shape) e *= d;
    n += e;
  }
  return n;
}

TEST(Presets, AllValidate) {
  for (const auto& p : model_presets()) EXPECT_TRUE(validate_model_config(p.config).ok()) << p.name;
  EXPECT_FALSE(find_preset("nope").ok());
}

TEST(Presets, PaperSizes) {
  const ModelConfig y3 = find_preset("yoco-3b").value();
  EXPECT_EQ(y3.n_layers, 26);
  EXPECT_EQ(y3.dim, 3072);
  EXPECT_EQ(y3.hidden_dim, 8192);
  EXPECT_EQ(y3.n_attn_heads, 24);
  EXPECT_EQ(y3.n_attn_kv_heads, 8);
  EXPECT_EQ(y3.vocab_size, 100288);
  EXPECT_FALSE(y3.is_swa());
  const double b3 = parameter_count(y3) / 1e9;
  EXPECT_GT(b3, 2.8);
  EXPECT_LT(b3, 3.6);
  const ModelConfig yu = find_preset("yoco-u-1.3b").value();
  EXPECT_EQ(yu.sliding_window, 512);
  EXPECT_EQ(yu.n_loops, 3);
  EXPECT_FALSE(yu.cross_decoder_rope);
  EXPECT_EQ(yu.vocab_size, 151936);
  EXPECT_EQ(yu.n_attn_kv_heads, 4);
  const double b13 = parameter_count(yu) / 1e9;
  EXPECT_GT(b13, 1.1);
  EXPECT_LT(b13, 2.5);  // the shape (ffn 7680) carries more than the name's 1.3B
  std::printf("yoco-3b %.2fB parameters, yoco-u-1.3b %.2fB\n", b3, b13);
}

// Parameters a token reads: all but the routed experts it was not sent to.
int64_t active_parameter_count(const ModelConfig& c) {
  const int64_t per_expert = 3LL * c.expert_hidden_dim * c.dim;
  return parameter_count(c) - static_cast<int64_t>(c.n_layers) * (c.n_experts - c.n_experts_per_token) * per_expert;
}

TEST(Presets, YocoUMoeIsTheTable6Model) {
  const ModelConfig m = find_preset("yoco-u-moe").value();
  EXPECT_EQ(m.dim, 2560);
  EXPECT_EQ(m.n_layers, 20);
  EXPECT_EQ(m.n_self_layers, 10);
  EXPECT_EQ(m.sliding_window, 512);
  EXPECT_EQ(m.n_loops, 3);
  EXPECT_FALSE(m.cross_decoder_rope);
  EXPECT_EQ(m.n_attn_heads, 20);
  EXPECT_EQ(m.n_attn_kv_heads, 4);
  EXPECT_EQ(m.n_experts, 64);
  EXPECT_EQ(m.n_experts_per_token, 8);
  EXPECT_EQ(m.expert_hidden_dim, 1024);
  EXPECT_EQ(m.shared_expert_hidden_dim, 1024);
  EXPECT_EQ(m.vocab_size, 151936);
  // Seed 003: "the total parameter is 10B and the activated parameter is 1.3B".
  const double total = parameter_count(m) / 1e9, active = active_parameter_count(m) / 1e9;
  std::printf("yoco-u-moe %.2fB parameters, %.2fB active\n", total, active);
  EXPECT_GT(total, 9.5);
  EXPECT_LT(total, 11.5);
  EXPECT_GT(active, 1.2);
  EXPECT_LT(active, 2.3);  // the paper's 1.3B leaves out the 0.4B embedding and attention
  // The dense model of the same active FFN size: 8 · 1024 + 1024 hidden units.
  const ModelConfig d = find_preset("yoco-u-dense-active").value();
  EXPECT_EQ(d.hidden_dim, m.n_experts_per_token * m.expert_hidden_dim + m.shared_expert_hidden_dim);
  const int64_t routers = static_cast<int64_t>(m.n_layers) * m.n_experts * m.dim;
  EXPECT_EQ(active_parameter_count(m) - routers, parameter_count(d));
}

}  // namespace
}  // namespace yoco
