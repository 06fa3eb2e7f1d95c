// 16-bit K/V (docs/design.md, 16-bit K/V): a bf16 KvPool keeps the global K/V rows (a
// transformer's per-layer rows) rounded to bf16. On every architecture the CPU engine over a bf16
// pool decodes within the bf16 bar of the fp32 pool; YOCO's rows are exactly the fp32 rows rounded
// (the self-decoder never reads them); forks, read_rows and the hand-off format carry the 16-bit
// rows bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

class Kv16Test : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (const char* preset : {"tiny-gret", "tiny-swa", "tiny-yocou", "tiny-moe-gret", "tiny-transformer"}) {
      auto cfg = find_preset(preset);
      ASSERT_TRUE(cfg.ok());
      ASSERT_TRUE(write_random_model(dir_->sub(preset), cfg.value(), 7, DType::kF32).ok());
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    auto m = Model::load(dir_->sub(GetParam()));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }
  static std::vector<int32_t> tokens(int n, uint32_t seed, int vocab) {
    std::mt19937 g(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
    return t;
  }
  struct Run {
    std::unique_ptr<KvPool> pool;
    std::unique_ptr<Engine> engine;
    Engine::SeqId id = -1;
  };
  Run start(KvDType dtype, std::span<const int32_t> prompt) const {
    Run r;
    r.pool = std::move(KvPool::create(16, 64, model_->kv_row_floats(), dtype).value());
    EngineOptions eo;
    eo.threads = 1;
    r.engine = std::move(make_engine(*model_, r.pool.get(), eo).value());
    SequenceState fresh = model_->new_sequence();
    r.id = r.engine->adopt(fresh).value();
    EXPECT_TRUE(r.engine->reserve(r.id, 256).ok());
    PrefillOptions opt;
    opt.chunk_tokens = 48;
    EXPECT_TRUE(r.engine->prefill(r.id, prompt, opt).ok());
    return r;
  }
  static std::vector<double> log_softmax(const float* l, int n) {
    double mx = l[0];
    for (int i = 1; i < n; ++i) mx = std::max<double>(mx, l[i]);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp(l[i] - mx);
    std::vector<double> out(n);
    for (int i = 0; i < n; ++i) out[i] = l[i] - mx - std::log(sum);
    return out;
  }
  static test::TempDir* dir_;
  std::unique_ptr<Model> model_;
};
test::TempDir* Kv16Test::dir_ = nullptr;

TEST_P(Kv16Test, DecodesWithinTheBf16BarOfFp32) {
  const int V = model_->config().vocab_size;
  const auto prompt = tokens(150, 1, V);
  Run f32 = start(KvDType::kF32, prompt), b16 = start(KvDType::kBF16, prompt);
  ASSERT_EQ(b16.pool->kv_dtype(), KvDType::kBF16);
  ASSERT_EQ(b16.pool->k_data(), nullptr);  // no fp32 copy anywhere
  std::vector<float> lf(V), lb(V);
  ASSERT_TRUE(f32.engine->logits(std::span(&f32.id, 1), lf.data()).ok());
  ASSERT_TRUE(b16.engine->logits(std::span(&b16.id, 1), lb.data()).ok());
  double worst = 0;
  bool differs = false;
  for (int step = 0; step < 40; ++step) {  // 150 → 190 rows: across a 64-row block
    const auto pf = log_softmax(lf.data(), V), pb = log_softmax(lb.data(), V);
    for (int i = 0; i < V; ++i) {
      worst = std::max(worst, std::fabs(pf[i] - pb[i]));
      differs |= lf[i] != lb[i];
    }
    // Both follow the fp32 run's tokens.
    const int32_t t = static_cast<int32_t>(std::max_element(lf.begin(), lf.end()) - lf.begin());
    ASSERT_TRUE(f32.engine->decode_step(std::span(&f32.id, 1), std::span(&t, 1), lf.data()).ok());
    ASSERT_TRUE(b16.engine->decode_step(std::span(&b16.id, 1), std::span(&t, 1), lb.data()).ok());
  }
  EXPECT_LT(worst, 2e-2) << GetParam();
  EXPECT_TRUE(differs) << "the 16-bit rows changed nothing: the test cannot tell the pools apart";
  if (model_->config().is_transformer()) return;  // its rows are laid out layer-major (model/state.h)
  // YOCO's rows come from the self-decoder alone: the bf16 pool holds the fp32 rows rounded.
  const int KV = model_->config().kv_dim();
  const int64_t n = f32.engine->position(f32.id);
  std::vector<float> kf(n * KV), vf(kf.size()), kb(kf.size()), vb(kf.size());
  ASSERT_TRUE(f32.engine->read_rows(f32.id, 0, n, kf.data(), vf.data()).ok());
  ASSERT_TRUE(b16.engine->read_rows(b16.id, 0, n, kb.data(), vb.data()).ok());
  for (size_t i = 0; i < kf.size(); ++i) {
    ASSERT_EQ(kb[i], bf16_to_f32(f32_to_bf16(kf[i]))) << i;
    ASSERT_EQ(vb[i], bf16_to_f32(f32_to_bf16(vf[i]))) << i;
  }
}

TEST_P(Kv16Test, ForkDecodesBitwiseLikeItsParent) {
  const int V = model_->config().vocab_size;
  Run r = start(KvDType::kBF16, tokens(100, 2, V));  // a partial second block: copied by the fork
  auto child = r.engine->fork(r.id);
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  ASSERT_TRUE(r.engine->reserve(*child, 256).ok());
  std::vector<float> lp(V), lc(V);
  ASSERT_TRUE(r.engine->logits(std::span(&r.id, 1), lp.data()).ok());
  ASSERT_TRUE(r.engine->logits(std::span(&*child, 1), lc.data()).ok());
  for (int step = 0; step < 20; ++step) {
    ASSERT_EQ(0, std::memcmp(lp.data(), lc.data(), lp.size() * 4)) << "step " << step;
    const int32_t t = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    ASSERT_TRUE(r.engine->decode_step(std::span(&r.id, 1), std::span(&t, 1), lp.data()).ok());
    ASSERT_TRUE(r.engine->decode_step(std::span(&*child, 1), std::span(&t, 1), lc.data()).ok());
  }
}

TEST_P(Kv16Test, HandOffCarriesTheRowsBitForBit) {
  if (model_->config().is_transformer()) GTEST_SKIP() << "transformer states are not serialized (model/state.h)";
  const ModelConfig& c = model_->config();
  const int V = c.vocab_size, KV = c.kv_dim();
  const auto prompt = tokens(90, 3, V);
  // Prefill into a bf16 pool with the model directly, ship as a bf16 blob, restore into a second
  // bf16 pool: both decode alike, bit for bit.
  auto pool = std::move(KvPool::create(16, 32, KV, KvDType::kBF16).value());
  SequenceState a = model_->new_sequence();
  a.pages = pool->new_pages();
  ASSERT_TRUE(pool->reserve(*a.pages, 200).ok());
  ASSERT_TRUE(model_->prefill(a, prompt).ok());
  StateBlobOptions so;
  so.kv_dtype = KvDType::kBF16;
  const auto blob = serialize_state(a, c, model_->fingerprint(), so);
  SequenceState shipped;
  auto info = deserialize_state(blob, c, model_->fingerprint(), shipped);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->kv_dtype, KvDType::kBF16);
  ASSERT_EQ(static_cast<int64_t>(shipped.k.size()), a.position * KV);
  std::vector<float> k(KV), v(KV);
  for (int64_t r = 0; r < a.position; ++r) {
    a.read_kv(r, KV, 0, KV, k.data(), v.data());
    ASSERT_EQ(0, std::memcmp(k.data(), shipped.k_row(r, KV), KV * 4)) << r;
    ASSERT_EQ(0, std::memcmp(v.data(), shipped.v_row(r, KV), KV * 4)) << r;
  }
  // Into a second bf16 pool, as a transfer receiver would place them.
  auto pool2 = std::move(KvPool::create(16, 32, KV, KvDType::kBF16).value());
  SequenceState b = shipped;
  b.k.clear();
  b.v.clear();
  b.pages = pool2->new_pages();
  ASSERT_TRUE(pool2->reserve(*b.pages, 200).ok());
  for (int64_t r = 0; r < a.position; ++r) b.write_kv(r, KV, 0, KV, shipped.k_row(r, KV), shipped.v_row(r, KV));
  SequenceState* pa[1] = {&a};
  SequenceState* pb[1] = {&b};
  std::vector<float> la(V), lb(V);
  ASSERT_TRUE(model_->logits(pa, la.data()).ok());
  ASSERT_TRUE(model_->logits(pb, lb.data()).ok());
  for (int step = 0; step < 10; ++step) {
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "step " << step;
    const int32_t t[1] = {static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin())};
    ASSERT_TRUE(model_->decode_step(pa, t, la.data()).ok());
    ASSERT_TRUE(model_->decode_step(pb, t, lb.data()).ok());
  }
  pool->release(*a.pages);
  pool2->release(*b.pages);
}

INSTANTIATE_TEST_SUITE_P(Presets, Kv16Test,
                         ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou", "tiny-moe-gret", "tiny-transformer"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace yoco
