// The equivalences of docs/design.md §2.5 on random models (gRet, SWA, YOCO-U with 3 loops and NoPE,
// and mixtures of experts of both):
// prefill + decode = full forward; chunked, serialized and resumed prefill = one-shot;
// batched decode = one at a time; looping = unrolling; prefill-only weights = full weights.
#include "model/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (const char* preset : {"tiny-gret", "tiny-swa", "tiny-yocou", "tiny-moe-gret", "tiny-moe-yocou"}) {
      auto cfg = find_preset(preset);
      ASSERT_TRUE(cfg.ok());
      ASSERT_TRUE(write_random_model(dir_->sub(preset), cfg.value(), 42, DType::kF32).ok());
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  std::string model_dir() const { return dir_->sub(GetParam()); }
  std::unique_ptr<Model> load(WeightSet set = WeightSet::kFull) const {
    auto m = Model::load(model_dir(), set);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  static std::vector<int32_t> tokens(int n, uint32_t seed, int vocab) {
    std::mt19937 g(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
    return t;
  }
  static std::vector<float> all_logits(const Model& m, std::span<const int32_t> toks) {
    std::vector<float> out(toks.size() * m.config().vocab_size);
    EXPECT_TRUE(m.forward(toks, [&](int64_t pos0, int rows, const float* l) {
                   std::memcpy(&out[pos0 * m.config().vocab_size], l, sizeof(float) * rows * m.config().vocab_size);
                 }).ok());
    return out;
  }
  static test::TempDir* dir_;
};
test::TempDir* EngineTest::dir_ = nullptr;

void expect_states_near(const SequenceState& a, const SequenceState& b, double tol) {
  ASSERT_EQ(a.position, b.position);
  ASSERT_EQ(a.k.size(), b.k.size());
  EXPECT_LT(test::max_abs_diff(a.k.data(), b.k.data(), a.k.size()), tol);
  EXPECT_LT(test::max_abs_diff(a.v.data(), b.v.data(), a.v.size()), tol);
  EXPECT_LT(test::max_abs_diff(a.last_hidden.data(), b.last_hidden.data(), a.last_hidden.size()), tol * 10);
  ASSERT_EQ(a.self.size(), b.self.size());
  for (size_t i = 0; i < a.self.size(); ++i) {
    EXPECT_LT(test::max_abs_diff(a.self[i].s.data(), b.self[i].s.data(), a.self[i].s.size()), tol) << i;
    ASSERT_EQ(a.self[i].count, b.self[i].count);
    const int dim = a.self[i].capacity ? static_cast<int>(a.self[i].k.size()) / a.self[i].capacity : 0;
    for (int r = 0; r < a.self[i].count; ++r) {
      const float* ka = a.self[i].k.data() + static_cast<size_t>(a.self[i].ring_index(r)) * dim;
      const float* kb = b.self[i].k.data() + static_cast<size_t>(b.self[i].ring_index(r)) * dim;
      EXPECT_LT(test::max_abs_diff(ka, kb, dim), tol) << "layer " << i << " row " << r;
    }
  }
}

TEST_P(EngineTest, PrefillPlusDecodeStepsEqualFullForward) {
  auto m = load();
  const int V = m->config().vocab_size;
  const auto toks = tokens(60, 1, V);
  const auto full = all_logits(*m, toks);
  for (int n0 : {1, 10, 33}) {
    SequenceState st = m->new_sequence();
    SequenceState* one[1] = {&st};
    std::vector<float> logits(V);
    PrefillOptions opt;
    opt.chunk_tokens = 7;
    opt.retention_chunk = 5;
    ASSERT_TRUE(m->prefill(st, std::span(toks).first(n0), opt).ok());
    ASSERT_TRUE(m->logits(one, logits.data()).ok());
    EXPECT_LT(test::max_abs_diff(logits.data(), &full[static_cast<size_t>(n0 - 1) * V], V), 1e-4) << "pos " << n0 - 1;
    for (size_t p = n0; p < toks.size(); ++p) {
      const int32_t t[1] = {toks[p]};
      ASSERT_TRUE(m->decode_step(one, t, logits.data()).ok());
      ASSERT_LT(test::max_abs_diff(logits.data(), &full[p * V], V), 1e-4) << "pos " << p << " n0 " << n0;
    }
  }
}

// A forward over a state (Score's slices on the decode worker) is a prefill that also gives every
// row's logits: the same state bit for bit, resumable from a prefill or another forward, and each
// row's logits those of the full forward.
TEST_P(EngineTest, ForwardOverAStateIsAPrefillWithEveryRowsLogits) {
  auto m = load();
  const int V = m->config().vocab_size;
  const auto toks = tokens(70, 7, V);
  const auto full = all_logits(*m, toks);
  PrefillOptions opt;
  opt.chunk_tokens = 9;
  opt.retention_chunk = 4;
  SequenceState pre = m->new_sequence(), fwd = m->new_sequence();
  ASSERT_TRUE(m->prefill(pre, toks, opt).ok());
  // Slices of 9: the first from a prefill, then forwards of 18 and the rest.
  const std::span<const int32_t> all(toks);
  ASSERT_TRUE(m->prefill(fwd, all.first(9), opt).ok());
  std::vector<float> logits((toks.size() - 9) * V);
  ASSERT_TRUE(m->forward(fwd, all.subspan(9, 18), logits.data(), opt).ok());
  ASSERT_TRUE(m->forward(fwd, all.subspan(27), logits.data() + 18 * V, opt).ok());
  expect_states_near(fwd, pre, 1e-30);  // bitwise: the same chunks through the same self-decoder ops
  EXPECT_EQ(fwd.last_hidden, pre.last_hidden);
  EXPECT_LT(test::max_abs_diff(logits.data(), &full[9 * static_cast<size_t>(V)], logits.size()), 1e-4);
  // The last row's logits are what logits() gives after it (a one-row attention: not bitwise).
  std::vector<float> next(V);
  SequenceState* one[1] = {&fwd};
  ASSERT_TRUE(m->logits(one, next.data()).ok());
  EXPECT_LT(test::max_abs_diff(next.data(), logits.data() + logits.size() - V, V), 1e-5);
  EXPECT_EQ(m->forward(fwd, std::vector<int32_t>{V}, next.data(), opt).code(), StatusCode::kInvalidArgument);

  // The CPU engine's forward is the Model's, in the worker's pool.
  auto pool = KvPool::create(8, 32, m->kv_row_floats());
  ASSERT_TRUE(pool.ok());
  EngineOptions eo;
  eo.threads = 1;
  auto engine = make_engine(*m, (*pool).get(), eo);
  ASSERT_TRUE(engine.ok());
  SequenceState fresh = m->new_sequence();
  auto id = (*engine)->adopt(fresh);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE((*engine)->reserve(*id, 70).ok());
  ASSERT_TRUE((*engine)->prefill(*id, all.first(9), opt).ok());
  std::vector<float> got(logits.size());
  ASSERT_TRUE((*engine)->forward(*id, all.subspan(9, 18), opt, got.data()).ok());
  ASSERT_TRUE((*engine)->forward(*id, all.subspan(27), opt, got.data() + 18 * V).ok());
  EXPECT_EQ(got, logits);
  EXPECT_EQ((*engine)->forward(*id + 1, all.first(1), opt, got.data()).code(), StatusCode::kNotFound);
  ASSERT_TRUE((*engine)->release(*id).ok());
}

TEST_P(EngineTest, ChunkedPrefillResumedFromSerializedStateEqualsOneShot) {
  auto m = load();
  const auto toks = tokens(90, 2, m->config().vocab_size);
  SequenceState one_shot = m->new_sequence();
  ASSERT_TRUE(m->prefill(one_shot, toks).ok());
  for (int chunk : {1, 7, 64}) {
    for (size_t split : {size_t{1}, size_t{20}, size_t{77}}) {
      PrefillOptions opt;
      opt.chunk_tokens = chunk;
      SequenceState first = m->new_sequence();
      ASSERT_TRUE(m->prefill(first, std::span(toks).first(split), opt).ok());
      const auto blob = serialize_state(first, m->config(), m->fingerprint());
      SequenceState resumed;
      ASSERT_TRUE(deserialize_state(blob, m->config(), m->fingerprint(), resumed).ok());
      ASSERT_TRUE(m->prefill(resumed, std::span(toks).subspan(split), opt).ok());
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " split " + std::to_string(split));
      expect_states_near(one_shot, resumed, 1e-4);
    }
  }
}

TEST_P(EngineTest, RestoredStateDecodesBitwiseIdentically) {
  auto m = load();
  const int V = m->config().vocab_size;
  const auto toks = tokens(40, 3, V);
  SequenceState a = m->new_sequence();
  ASSERT_TRUE(m->prefill(a, toks).ok());
  SequenceState b;
  ASSERT_TRUE(
      deserialize_state(serialize_state(a, m->config(), m->fingerprint()), m->config(), m->fingerprint(), b).ok());
  SequenceState* pa[1] = {&a};
  SequenceState* pb[1] = {&b};
  std::vector<float> la(V), lb(V);
  ASSERT_TRUE(m->logits(pa, la.data()).ok());
  ASSERT_TRUE(m->logits(pb, lb.data()).ok());
  for (int step = 0; step < 20; ++step) {
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "step " << step;
    const int32_t t[1] = {static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin())};
    ASSERT_TRUE(m->decode_step(pa, t, la.data()).ok());
    ASSERT_TRUE(m->decode_step(pb, t, lb.data()).ok());
  }
}

TEST_P(EngineTest, BatchedDecodeEqualsOneAtATime) {
  auto m = load();
  const int V = m->config().vocab_size;
  const std::vector<int> lens = {3, 17, 40, 1, 25};
  std::vector<SequenceState> batch, single;
  for (size_t i = 0; i < lens.size(); ++i) {
    const auto toks = tokens(lens[i], 10 + static_cast<uint32_t>(i), V);
    batch.push_back(m->new_sequence());
    ASSERT_TRUE(m->prefill(batch.back(), toks).ok());
    single.push_back(batch.back());
  }
  std::vector<SequenceState*> ptrs;
  for (auto& s : batch) ptrs.push_back(&s);
  std::vector<float> lb(lens.size() * V), ls(V);
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> next(lens.size());
    for (size_t i = 0; i < lens.size(); ++i) next[i] = static_cast<int32_t>((step * 31 + i * 7) % V);
    ASSERT_TRUE(m->decode_step(ptrs, next, lb.data()).ok());
    for (size_t i = 0; i < lens.size(); ++i) {
      SequenceState* one[1] = {&single[i]};
      const int32_t t[1] = {next[i]};
      ASSERT_TRUE(m->decode_step(one, t, ls.data()).ok());
      ASSERT_LT(test::max_abs_diff(ls.data(), &lb[i * V], V), 1e-5) << "seq " << i << " step " << step;
    }
  }
}

TEST_P(EngineTest, PrefillOnlyWeightsGiveTheSameStateAndFingerprint) {
  auto full = load(WeightSet::kFull);
  auto pre = load(WeightSet::kPrefill);
  EXPECT_EQ(full->fingerprint(), pre->fingerprint());
  EXPECT_LT(pre->weights().bytes(), full->weights().bytes());
  const auto toks = tokens(30, 4, full->config().vocab_size);
  SequenceState a = full->new_sequence(), b = pre->new_sequence();
  ASSERT_TRUE(full->prefill(a, toks).ok());
  ASSERT_TRUE(pre->prefill(b, toks).ok());
  EXPECT_EQ(serialize_state(a, full->config(), full->fingerprint()),
            serialize_state(b, pre->config(), pre->fingerprint()));
  SequenceState* pb[1] = {&b};
  std::vector<float> logits(full->config().vocab_size);
  EXPECT_EQ(pre->logits(pb, logits.data()).code(), StatusCode::kFailedPrecondition);
}

TEST_P(EngineTest, BadTokensAreRejectedWithTheFieldNamed) {
  auto m = load();
  SequenceState st = m->new_sequence();
  const std::vector<int32_t> bad = {1, 2, m->config().vocab_size};
  Status s = m->prefill(st, bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokens[2]"), std::string::npos) << s.message();
  EXPECT_EQ(st.position, 0);  // nothing consumed
  EXPECT_FALSE(m->score(std::vector<int32_t>{1}).ok());
}

INSTANTIATE_TEST_SUITE_P(Presets, EngineTest,
                         ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou", "tiny-moe-gret", "tiny-moe-yocou"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

// YOCO-U semantics: T loops over L_s shared layers (each (loop, layer) with its own state, the
// same positions every loop) = a plain self-decoder of T·L_s layers holding the copies.
TEST(Loops, LoopedSelfDecoderEqualsUnrolledCopies) {
  test::TempDir dir;
  for (const char* preset : {"tiny-yocou", "tiny-gret"}) {
    auto cfg = find_preset(preset);
    ASSERT_TRUE(cfg.ok());
    ModelConfig c = cfg.value();
    c.n_loops = 3;
    ASSERT_TRUE(write_random_model(dir.sub(preset), c, 5, DType::kF32).ok());
    auto looped = load_model_dir(dir.sub(preset));
    ASSERT_TRUE(looped.ok());
    LoadedWeights unrolled = looped.value();
    unrolled.config.n_loops = 1;
    unrolled.config.n_self_layers = c.n_self_layers * 3;
    unrolled.config.n_layers = c.n_layers + c.n_self_layers * 2;
    auto layers = unrolled.weights.self_layers;
    unrolled.weights.self_layers.clear();
    for (int t = 0; t < 3; ++t)
      unrolled.weights.self_layers.insert(unrolled.weights.self_layers.end(), layers.begin(), layers.end());
    Model a(std::move(looped).value()), b(std::move(unrolled));
    std::vector<int32_t> toks;
    for (int i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % c.vocab_size);
    auto sa = a.score(toks), sb = b.score(toks);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_LT(test::max_abs_diff(sa->data(), sb->data(), sa->size()), 1e-6) << preset;
  }
}

// n_loops: 1 written explicitly is plain YOCO (the golden model has no n_loops key).
TEST(Loops, OneLoopIsPlainYoco) {
  test::TempDir dir;
  const std::string src = test::goldens_dir() + "/gret_tied";
  auto params = Json::parse(test::read_file(src + "/params.json"));
  ASSERT_TRUE(params.ok());
  ASSERT_EQ(params->find("n_loops"), nullptr);
  params->mutable_object()["n_loops"] = Json(1);
  test::write_file(dir.sub("params.json"), params->dump());
  test::write_file(dir.sub("model.safetensors"), test::read_file(src + "/model.safetensors"));
  auto a = Model::load(src), b = Model::load(dir.path());
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> toks = {1, 5, 9, 2, 33, 7, 7, 0, 12};
  auto sa = (*a)->score(toks), sb = (*b)->score(toks);
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(sa.value(), sb.value());
}

// make_engine's CPU engine: the Model's numbers, rows read into the caller's buffers.
TEST(MakeEngine, CpuEngineRunsTheModelAndReadsRowsOut) {
  test::TempDir dir;
  auto cfg = find_preset("tiny-gret");
  ASSERT_TRUE(cfg.ok());
  ASSERT_TRUE(write_random_model(dir.sub("m"), cfg.value(), 42, DType::kF32).ok());
  auto model = Model::load(dir.sub("m"));
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  EngineOptions eo;
  eo.threads = 1;
  auto engine = make_engine(m, nullptr, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  EXPECT_EQ(e.device(), "cpu");

  const std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6};
  SequenceState st = m.new_sequence();
  auto id = e.adopt(st);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(e.prefill(*id, toks, PrefillOptions{3, 64}).ok());
  EXPECT_EQ(e.position(*id), 8);

  SequenceState ref = m.new_sequence();
  ASSERT_TRUE(m.prefill(ref, toks, PrefillOptions{3, 64}).ok());
  const int KV = m.config().kv_dim();
  std::vector<float> k(3 * KV), v(3 * KV);
  ASSERT_TRUE(e.read_rows(*id, 2, 3, k.data(), v.data()).ok());
  EXPECT_EQ(std::memcmp(k.data(), ref.k_row(2, KV), k.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v.data(), ref.v_row(2, KV), v.size() * 4), 0);
  EXPECT_EQ(e.read_rows(*id, 6, 3, k.data(), v.data()).code(), StatusCode::kInvalidArgument);

  std::vector<float> got(m.config().vocab_size), want(got.size());
  const Engine::SeqId ids[1] = {*id};
  ASSERT_TRUE(e.logits(ids, got.data()).ok());
  SequenceState* refs[1] = {&ref};
  ASSERT_TRUE(m.logits(refs, want.data()).ok());
  EXPECT_EQ(got, want);
  ASSERT_TRUE(e.release(*id).ok());
  EXPECT_EQ(e.release(*id).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace yoco
