#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace yoco {
namespace {

std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

int32_t draw(const SamplingParams& p, std::vector<float> logits, std::vector<int32_t> prompt = {}) {
  Sampler s(p, static_cast<int>(logits.size()), prompt);
  return s.sample(logits.data());
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(draw(p, {0.1f, 3.0f, -1.0f, 2.9f}), 1);
}

TEST(Sampler, SeededDrawsRepeatAndFollowTheDistribution) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  SamplingParams p;
  p.seed = 1234;
  Sampler a(p, 4, {}), b(p, 4, {});
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto la = logits_for(probs), lb = logits_for(probs);
    const int32_t x = a.sample(la.data());
    ASSERT_EQ(x, b.sample(lb.data()));
    ++counts[x];
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / static_cast<double>(n), probs[i], 0.015) << i;
}

TEST(Sampler, TruncationsKeepOnlyTheirCandidates) {
  const std::vector<double> probs = {0.05, 0.5, 0.3, 0.15};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams k1;
    k1.seed = seed;
    k1.top_k = 1;
    EXPECT_EQ(draw(k1, logits_for(probs)), 1);
    SamplingParams k2 = k1;
    k2.top_k = 2;
    const int32_t t = draw(k2, logits_for(probs));
    EXPECT_TRUE(t == 1 || t == 2);
    SamplingParams tp;
    tp.seed = seed;
    tp.top_p = 0.75f;  // 0.5 + 0.3 reaches it
    const int32_t u = draw(tp, logits_for(probs));
    EXPECT_TRUE(u == 1 || u == 2);
    SamplingParams mp;
    mp.seed = seed;
    mp.min_p = 0.5f;  // keeps p >= 0.25
    const int32_t v = draw(mp, logits_for(probs));
    EXPECT_TRUE(v == 1 || v == 2);
  }
}

TEST(Sampler, PenaltiesMoveTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(draw(p, {2.0f, 1.5f, 0.0f}, {0}), 1);  // 2.0 / 2 < 1.5
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 1.0f;
  Sampler s(f, 3, {});
  std::vector<float> l = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.sample(l.data()), 0);
  l = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.sample(l.data()), 1);  // token 0 now pays 1.0
}

TEST(Sampler, ValidationNamesTheField) {
  auto msg = [](SamplingParams p) { return p.validate().message(); };
  SamplingParams p;
  EXPECT_TRUE(p.validate().ok());
  p.temperature = -1;
  EXPECT_EQ(msg(p).rfind("temperature", 0), 0u);
  p = {};
  p.top_p = 0;
  EXPECT_EQ(msg(p).rfind("top_p", 0), 0u);
  p = {};
  p.top_p = 1.5f;
  EXPECT_EQ(msg(p).rfind("top_p", 0), 0u);
  p = {};
  p.min_p = 2;
  EXPECT_EQ(msg(p).rfind("min_p", 0), 0u);
  p = {};
  p.top_k = -1;
  EXPECT_EQ(msg(p).rfind("top_k", 0), 0u);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_EQ(msg(p).rfind("repetition_penalty", 0), 0u);
  p = {};
  p.presence_penalty = 3;
  EXPECT_EQ(msg(p).rfind("presence_penalty", 0), 0u);
}

// NaN and infinities are refused as not finite, for every float field (not "must be >= 0" for +inf).
TEST(Sampler, NonFiniteValuesAreRefusedAsNotFinite) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  const std::pair<const char*, float SamplingParams::*> fields[] = {
      {"temperature", &SamplingParams::temperature},
      {"top_p", &SamplingParams::top_p},
      {"min_p", &SamplingParams::min_p},
      {"repetition_penalty", &SamplingParams::repetition_penalty},
      {"presence_penalty", &SamplingParams::presence_penalty},
      {"frequency_penalty", &SamplingParams::frequency_penalty}};
  for (const auto& [name, field] : fields)
    for (float v : bad) {
      SamplingParams p;
      p.*field = v;
      const Status st = p.validate();
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name << " = " << v;
      EXPECT_EQ(st.message().rfind(std::string(name) + ": must be finite", 0), 0u) << st.message();
    }
}

}  // namespace
}  // namespace yoco
