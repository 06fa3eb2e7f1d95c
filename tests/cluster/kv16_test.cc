// 16-bit K/V through the cluster (docs/design.md, 16-bit K/V): a decode worker started with
// --kv-dtype bf16 keeps its pool in bf16; the prefill worker rounds the rows as it sends them
// (descriptor version 4). Greedy tokens equal the in-process CPU engine over a bf16 pool, both
// disaggregated (1 prefill + 1 decode worker) and colocated (the decode worker prefills into its
// own bf16 pool), and a bad --kv-dtype stops the worker with an error naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/random_model.h"
#include "tests/support/cluster_harness.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::greedy;
using test::LocalCluster;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

// Greedy tokens of the CPU engine with its rows in a pool of `dtype`, and their log-probabilities
// as the decode worker computes them.
struct Tokens {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};
Tokens engine_tokens(const Model& m, const std::vector<int32_t>& prompt, int max_tokens, KvDType dtype) {
  auto pool = std::move(KvPool::create(64, 32, m.config().kv_dim(), dtype).value());
  EngineOptions eo;
  auto engine = std::move(make_engine(m, pool.get(), eo).value());
  SequenceState fresh = m.new_sequence();
  const Engine::SeqId id = engine->adopt(fresh).value();
  EXPECT_TRUE(engine->reserve(id, static_cast<int64_t>(prompt.size()) + max_tokens).ok());
  EXPECT_TRUE(engine->prefill(id, prompt, PrefillOptions{}).ok());
  const int V = m.config().vocab_size;
  std::vector<float> logits(V);
  EXPECT_TRUE(engine->logits(std::span(&id, 1), logits.data()).ok());
  Tokens out;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.ids.push_back(t);
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - logits[t]);
    out.logprobs.push_back(static_cast<float>(-std::log(sum)));
    if (i + 1 < max_tokens) EXPECT_TRUE(engine->decode_step(std::span(&id, 1), std::span(&t, 1), logits.data()).ok());
  }
  return out;
}

class Kv16Cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(write_random_model(tmp_.sub("model"), find_preset("tiny-yocou").value(), 9, DType::kF32).ok());
    dir_ = tmp_.sub("model");
    auto m = Model::load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    // Around the 32-row block and a 64-token prefill chunk.
    for (int n : {1, 31, 65, 130}) prompts_.push_back(random_tokens(n, model_->config().vocab_size, 60 + n));
  }
  std::vector<Tokens> greedy_through(LocalCluster& c, int max_tokens) {
    auto stub = c.stub();
    std::vector<Tokens> out;
    for (const auto& p : prompts_) {
      v1::GenerateRequest req = greedy(p, max_tokens);
      req.set_logprobs(1);
      const auto g = test::run_generate(*stub, req, milliseconds(60000));
      EXPECT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
      out.push_back({g.ids, g.logprobs});
    }
    return out;
  }
  // Same tokens, and log-probabilities within `tol`; returns the largest difference.
  static double compare(const std::vector<Tokens>& got, const std::vector<Tokens>& want, double tol) {
    double worst = 0;
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      EXPECT_EQ(got[i].ids, want[i].ids) << "prompt " << i;
      EXPECT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "prompt " << i;
      for (size_t j = 0; j < got[i].logprobs.size() && j < want[i].logprobs.size(); ++j)
        worst = std::max(worst, std::fabs(static_cast<double>(got[i].logprobs[j]) - want[i].logprobs[j]));
    }
    EXPECT_LE(worst, tol);
    return worst;
  }

  test::TempDir tmp_;
  std::string dir_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(Kv16Cluster, DisaggregatedAndColocatedGiveTheBf16EngineTokens) {
  const int max_tokens = 24;
  std::vector<Tokens> want, want_f32;
  for (const auto& p : prompts_) {
    want.push_back(engine_tokens(*model_, p, max_tokens, KvDType::kBF16));
    want_f32.push_back(engine_tokens(*model_, p, max_tokens, KvDType::kF32));
  }
  // The test can tell the pools apart: the 16-bit rows move the log-probabilities.
  double f32_gap = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[i].logprobs.size() && want[i].ids == want_f32[i].ids; ++j)
      f32_gap = std::max(f32_gap, std::fabs(static_cast<double>(want[i].logprobs[j]) - want_f32[i].logprobs[j]));
  ASSERT_GT(f32_gap, 1e-4);
  {
    LocalCluster c({.model = dir_, .prefill = 1, .decode = 1, .decode_args = {"--kv-dtype=bf16"}});
    ASSERT_TRUE(c.ready()) << c.logs();
    compare(greedy_through(c, max_tokens), want, 1e-5);
    bool logged = false;
    for (const auto& [name, text] : c.process_logs()) logged |= text.find("kv_dtype=bf16") != std::string::npos;
    EXPECT_TRUE(logged) << c.logs();
  }
  LocalCluster colocated({.model = dir_, .prefill = 0, .decode = 1, .decode_args = {"--kv-dtype=bf16"}});
  ASSERT_TRUE(colocated.ready()) << colocated.logs();
  compare(greedy_through(colocated, max_tokens), want, 1e-5);
}

TEST_F(Kv16Cluster, ABadKvDtypeStopsTheWorkerNamingTheFlag) {
  LocalCluster c({.model = dir_, .prefill = 0, .decode = 1, .decode_args = {"--kv-dtype=fp8"}});
  EXPECT_FALSE(c.ready());
  bool named = false;
  for (const auto& [name, text] : c.process_logs())
    named |= text.find("--kv-dtype: 'fp8' is not f32 or bf16") != std::string::npos;
  EXPECT_TRUE(named) << c.logs();
}

}  // namespace
}  // namespace yoco
