// Engine::fork (docs/design.md §3.4, n choices share one prefill) on the CPU engine, for gRet, SWA,
// YOCO-U and the transformer baseline, with contiguous rows and in a paged KvPool:
//   a prompt prefilled once and forked n−1 times decodes bitwise like n sequences prefilled
//     separately, fed the same tokens in the same batch (decode_step after decode_step);
//   the forks share the prompt's whole pool blocks and copy only the partial last one;
//   releasing the leader first leaves the forks decoding unchanged, and releasing all gives
//     every block back;
//   an unknown id is NOT_FOUND; a pool with no block for the partial copy is RESOURCE_EXHAUSTED
//     and changes nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using SeqId = Engine::SeqId;

std::vector<int32_t> random_tokens(int n, uint32_t seed, int vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

// (preset, pool block size: 0 = contiguous rows, prompt length)
using Param = std::tuple<std::string, int, int>;

class EngineForkTest : public ::testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (const char* preset : {"tiny-gret", "tiny-swa", "tiny-yocou", "tiny-transformer"})
      ASSERT_TRUE(write_random_model(dir_->sub(preset), find_preset(preset).value(), 42, DType::kF32).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    auto m = Model::load(dir_->sub(std::get<0>(GetParam())));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    if (const int bs = std::get<1>(GetParam()); bs > 0) {
      auto p = KvPool::create(kBlocks, bs, model_->config().kv_row_floats());
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      pool_ = std::move(p).value();
    }
    EngineOptions eo;
    eo.threads = 1;
    auto e = make_engine(*model_, pool_.get(), eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
  }
  // A fresh sequence with room for `rows`, prefilled with `prompt`.
  SeqId prefilled(const std::vector<int32_t>& prompt, int64_t rows) {
    SequenceState st = model_->new_sequence();
    auto id = engine_->adopt(st);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_TRUE(engine_->reserve(*id, rows).ok());
    EXPECT_TRUE(engine_->prefill(*id, prompt, PrefillOptions{7, 64}).ok());
    return *id;
  }
  // One decode step of `ids`, sequence b fed tokens[b][step]; the logits [B, vocab].
  std::vector<float> step(const std::vector<SeqId>& ids, const std::vector<std::vector<int32_t>>& tokens, int s) {
    std::vector<int32_t> t;
    for (size_t b = 0; b < ids.size(); ++b) t.push_back(tokens[b][s]);
    std::vector<float> out(ids.size() * model_->config().vocab_size);
    EXPECT_TRUE(engine_->decode_step(ids, t, out.data()).ok());
    return out;
  }

  static constexpr int kBlocks = 64;
  static test::TempDir* dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvPool> pool_;
  std::unique_ptr<Engine> engine_;
};
test::TempDir* EngineForkTest::dir_ = nullptr;

TEST_P(EngineForkTest, ForksDecodeLikeSeparatelyPrefilledSequences) {
  const int V = model_->config().vocab_size;
  const int P = std::get<2>(GetParam());
  constexpr int kN = 4, kSteps = 40;  // steps cross a block boundary at block size 32
  const auto prompt = random_tokens(P, 1, V);
  std::vector<std::vector<int32_t>> feed;
  for (int b = 0; b < kN; ++b) feed.push_back(random_tokens(kSteps, 100 + b, V));

  std::vector<SeqId> separate;
  for (int b = 0; b < kN; ++b) separate.push_back(prefilled(prompt, P + kSteps));
  const int free_before_fork = pool_ ? pool_->free_blocks() : 0;
  std::vector<SeqId> forked = {prefilled(prompt, P)};
  const int leader_blocks = pool_ ? free_before_fork - pool_->free_blocks() : 0;
  for (int b = 1; b < kN; ++b) {
    auto f = engine_->fork(forked[0]);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(engine_->position(*f), P);
    forked.push_back(*f);
  }
  if (pool_) {  // each fork holds one block of its own (the partial last one), or none
    const int bs = pool_->block_size();
    const int own = P % bs != 0 ? 1 : 0;
    EXPECT_EQ(free_before_fork - pool_->free_blocks(), leader_blocks + (kN - 1) * own);
    EXPECT_EQ(pool_->shared_blocks(), P / bs);
  }
  for (SeqId id : forked) ASSERT_TRUE(engine_->reserve(id, P + kSteps).ok());

  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::vector<float> want = step(separate, feed, s), got = step(forked, feed, s);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
  }
  for (SeqId id : forked) ASSERT_TRUE(engine_->release(id).ok());
  for (SeqId id : separate) ASSERT_TRUE(engine_->release(id).ok());
  if (pool_) {
    EXPECT_EQ(pool_->free_blocks(), kBlocks);
    EXPECT_EQ(pool_->shared_blocks(), 0);
  }
}

TEST_P(EngineForkTest, ReleasingTheLeaderFirstLeavesTheForksUnchanged) {
  const int V = model_->config().vocab_size;
  const int P = std::get<2>(GetParam());
  constexpr int kSteps = 12;
  const auto prompt = random_tokens(P, 2, V);
  const std::vector<std::vector<int32_t>> feed = {random_tokens(kSteps, 7, V), random_tokens(kSteps, 8, V)};
  const std::vector<SeqId> separate = {prefilled(prompt, P + kSteps), prefilled(prompt, P + kSteps)};
  const SeqId leader = prefilled(prompt, P + kSteps);
  std::vector<SeqId> forked;
  for (int b = 0; b < 2; ++b) forked.push_back(engine_->fork(leader).value());
  // The leader runs on before it goes: the rows it writes past P are its own.
  std::vector<float> own(V);
  ASSERT_TRUE(engine_->decode_step(std::vector<SeqId>{leader}, std::vector<int32_t>{5}, own.data()).ok());
  ASSERT_TRUE(engine_->release(leader).ok());
  for (SeqId id : forked) ASSERT_TRUE(engine_->reserve(id, P + kSteps).ok());
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> want = step(separate, feed, s), got = step(forked, feed, s);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << "step " << s;
  }
  for (SeqId id : forked) ASSERT_TRUE(engine_->release(id).ok());
  for (SeqId id : separate) ASSERT_TRUE(engine_->release(id).ok());
  if (pool_) {
    EXPECT_EQ(pool_->free_blocks(), kBlocks);
  }
}

TEST_P(EngineForkTest, UnknownIdAndFullPool) {
  EXPECT_EQ(engine_->fork(12345).status().code(), StatusCode::kNotFound);
  if (!pool_) return;
  const int P = std::get<2>(GetParam());
  const int bs = pool_->block_size();
  const SeqId leader = prefilled(random_tokens(P, 3, model_->config().vocab_size), P);
  // Fill the pool with one sequence holding every free block.
  SequenceState st = model_->new_sequence();
  const SeqId hog = engine_->adopt(st).value();
  ASSERT_TRUE(engine_->reserve(hog, static_cast<int64_t>(pool_->free_blocks()) * bs).ok());
  ASSERT_EQ(pool_->free_blocks(), 0);
  auto f = engine_->fork(leader);
  if (P % bs != 0) {
    EXPECT_EQ(f.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(pool_->shared_blocks(), 0);
  } else {
    ASSERT_TRUE(f.ok()) << f.status().to_string();  // nothing to copy: all shared
    EXPECT_EQ(pool_->shared_blocks(), P / bs);
    ASSERT_TRUE(engine_->release(*f).ok());
  }
  ASSERT_TRUE(engine_->release(hog).ok());
  ASSERT_TRUE(engine_->release(leader).ok());
  EXPECT_EQ(pool_->free_blocks(), kBlocks);
}

// Prompt lengths: inside the first block, a whole number of 32-row blocks, past a boundary.
INSTANTIATE_TEST_SUITE_P(Presets, EngineForkTest,
                         ::testing::Combine(::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou",
                                                              "tiny-transformer"),
                                            ::testing::Values(0, 32, 64), ::testing::Values(9, 64, 77)),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           std::string n = std::get<0>(i.param) + "_block" + std::to_string(std::get<1>(i.param)) +
                                           "_prompt" + std::to_string(std::get<2>(i.param));
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace yoco
