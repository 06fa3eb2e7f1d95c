// The GPU engine (model/cuda/cuda_engine.h) against the CPU Model on random models: gRet (GQA 2), SWA,
// YOCO-U (3 loops, NoPE, GQA 4) and gRet with GQA 3. The CPU Model runs with the CUDA engine's
// roundings (load_cpu_mirror: bf16 weights, bf16 product inputs); the CUDA engine is made from the
// fp32 tensors of the same model.
//   logits: max |Δ log p| ≤ kLogprobTol over the whole vocabulary (left: bf16 tensor cores in the
//     prefill mixers, and where each engine rounds); greedy tokens equal wherever the CPU's top-2
//     margin exceeds 2·kLogprobTol (each of the two log-probs may be off by the tolerance);
//   states (docs/design.md §2.3: test S itself): ‖got − ref‖₂ ≤ kStateTol·‖ref‖₂ per tensor;
//   moving a state (download → upload, or through the serialized hand-off) decodes bitwise like
//     the original on the same device (same kernels, same batch shape);
//   a full KV pool returns RESOURCE_EXHAUSTED and changes nothing;
//   a forked sequence decodes bitwise like one prefilled separately.
// Decode always feeds the CPU's greedy token to both engines so the sequences stay the same.
// Label "gpu": every test skips when there is no CUDA device.
#include "model/cuda/cuda_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/state.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

constexpr double kLogprobTol = 2e-2;
constexpr double kStateTol = 2e-2;
using SeqId = CudaEngine::SeqId;

ModelConfig test_config(const std::string& name) {
  if (name == "gqa3-gret") {  // 6 query heads over 2 KV heads
    ModelConfig c = find_preset("tiny-gret").value();
    c.dim = 96;
    c.hidden_dim = 256;
    c.n_self_heads = 6;
    c.n_attn_heads = 6;
    c.n_attn_kv_heads = 2;
    return c;
  }
  return find_preset(name).value();
}

// The oracle of the engine-level comparisons: the CPU engine with the CUDA engine's roundings
// (bf16 weights, every product's input one bf16 term: Model::Bf16Inputs::kOneTerm, docs/design.md
// §2.5), so what the bar measures is the engines' difference, not bf16's. (The CPU's own bf16
// path is 0.016–0.032 from its fp32 path on these random models, the CUDA engine 0.020–0.046.)
std::unique_ptr<Model> load_cpu_mirror(const std::string& dir, WeightSet set = WeightSet::kFull) {
  auto m = Model::load(dir, set);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return nullptr;
  (*m)->use_bf16_weights(Model::Bf16Inputs::kOneTerm);
  return std::move(m).value();
}

// The CUDA engine is made from the fp32 tensors (it rounds them itself), loaded afresh.
Result<std::unique_ptr<CudaEngine>> cuda_engine_of(const std::string& dir, WeightSet set, const CudaEngineOptions& o) {
  auto m = Model::load(dir, set);
  if (!m.ok()) return m.status();
  return CudaEngine::create(**m, o);
}

std::vector<int32_t> random_tokens(int n, uint32_t seed, int vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

std::vector<double> log_softmax(const float* l, int V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(l[i]));
  double s = 0;
  for (int i = 0; i < V; ++i) s += std::exp(l[i] - mx);
  std::vector<double> r(V);
  for (int i = 0; i < V; ++i) r[i] = l[i] - mx - std::log(s);
  return r;
}

int argmax(const float* l, int V) { return static_cast<int>(std::max_element(l, l + V) - l); }

// max |Δ log p| over B rows, and greedy agreement where the CPU's margin is clear.
::testing::AssertionResult logits_close(const std::vector<float>& got, const std::vector<float>& ref, int B, int V) {
  if (got.size() < static_cast<size_t>(B) * V || ref.size() < static_cast<size_t>(B) * V)
    return ::testing::AssertionFailure() << "short logits";
  double worst = 0;
  int worst_row = 0;
  for (int b = 0; b < B; ++b) {
    const float* g = got.data() + static_cast<size_t>(b) * V;
    const float* r = ref.data() + static_cast<size_t>(b) * V;
    const auto lg = log_softmax(g, V), lr = log_softmax(r, V);
    for (int i = 0; i < V; ++i) {
      const double d = std::fabs(lg[i] - lr[i]);
      if (!(d <= worst)) {  // NaN sticks
        worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
        worst_row = b;
      }
    }
    std::vector<double> sorted = lr;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * kLogprobTol && argmax(g, V) != argmax(r, V))
      return ::testing::AssertionFailure() << "row " << b << ": greedy token " << argmax(g, V) << ", CPU "
                                           << argmax(r, V) << " (CPU margin " << sorted[0] - sorted[1] << ")";
  }
  if (worst > kLogprobTol)
    return ::testing::AssertionFailure() << "max |d logprob| " << worst << " (row " << worst_row << ") > "
                                         << kLogprobTol;
  return ::testing::AssertionSuccess() << "max |d logprob| " << worst;
}

::testing::AssertionResult norm_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!(rel <= kStateTol)) return ::testing::AssertionFailure() << what << ": relative L2 error " << rel;
  return ::testing::AssertionSuccess();
}

void expect_state_close(const SequenceState& got, const SequenceState& ref) {
  ASSERT_EQ(got.position, ref.position);
  EXPECT_TRUE(norm_close(got.k, ref.k, "K rows"));
  EXPECT_TRUE(norm_close(got.v, ref.v, "V rows"));
  EXPECT_TRUE(norm_close(got.last_hidden, ref.last_hidden, "last_hidden"));
  ASSERT_EQ(got.self.size(), ref.self.size());
  for (size_t i = 0; i < got.self.size(); ++i) {
    SCOPED_TRACE("self state " + std::to_string(i));
    EXPECT_TRUE(norm_close(got.self[i].s, ref.self[i].s, "gRet S"));
    EXPECT_TRUE(norm_close(got.self[i].k, ref.self[i].k, "SWA K ring"));
    EXPECT_TRUE(norm_close(got.self[i].v, ref.self[i].v, "SWA V ring"));
    EXPECT_EQ(got.self[i].count, ref.self[i].count);
    EXPECT_EQ(got.self[i].head, ref.self[i].head);
  }
}

void expect_same_state(const SequenceState& a, const SequenceState& b) {
  ASSERT_EQ(a.position, b.position);
  EXPECT_TRUE(same_bits(a.k, b.k));
  EXPECT_TRUE(same_bits(a.v, b.v));
  EXPECT_TRUE(same_bits(a.last_hidden, b.last_hidden));
  ASSERT_EQ(a.self.size(), b.self.size());
  for (size_t i = 0; i < a.self.size(); ++i) {
    EXPECT_TRUE(same_bits(a.self[i].s, b.self[i].s)) << i;
    EXPECT_TRUE(same_bits(a.self[i].k, b.self[i].k)) << i;
    EXPECT_TRUE(same_bits(a.self[i].v, b.self[i].v)) << i;
  }
}

std::vector<float> nan_logits(int B, int V) {
  return std::vector<float>(static_cast<size_t>(B) * V, std::numeric_limits<float>::quiet_NaN());
}

class CudaEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (cuda::device_count() == 0) return;
    dir_ = new test::TempDir();
    for (const char* name : {"tiny-gret", "tiny-swa", "tiny-yocou", "gqa3-gret"})
      ASSERT_TRUE(write_random_model(dir_->sub(name), test_config(name), 42, DType::kF32).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // The CPU oracle (load_cpu_mirror).
  std::unique_ptr<Model> load(WeightSet set = WeightSet::kFull) const {
    return load_cpu_mirror(dir_->sub(GetParam()), set);
  }
  static CudaEngineOptions small_options() {
    CudaEngineOptions o;
    o.max_sequences = 8;
    o.max_batch = 8;
    o.max_chunk_tokens = 64;
    o.max_context = 1024;
    o.kv_blocks = 64;
    o.kv_block_size = 32;
    return o;
  }
  // The CUDA engine of the same model and weight set as the oracle `m` (cuda_engine_of).
  std::unique_ptr<CudaEngine> engine(const Model& m, const CudaEngineOptions& o) const {
    auto e = cuda_engine_of(dir_->sub(GetParam()), m.has_cross_decoder() ? WeightSet::kFull : WeightSet::kPrefill, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static test::TempDir* dir_;
};
test::TempDir* CudaEngineTest::dir_ = nullptr;

// Prompts of several lengths (not multiples of the chunk, the retention chunk or the block size;
// longer than the window), then greedy decode steps for the whole batch and for a sub-batch.
TEST_P(CudaEngineTest, MatchesCpuModelAfterPrefillAndDecode) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  const auto gpu = engine(*cpu, small_options());
  ASSERT_TRUE(gpu);
  const int V = cpu->config().vocab_size;
  const std::vector<int> lens = {1, 7, 33, 64, 100, 161};
  const int B = static_cast<int>(lens.size());
  std::vector<SequenceState> cs(B);
  std::vector<SequenceState*> cp(B);
  std::vector<SeqId> ids(B);
  for (int b = 0; b < B; ++b) {
    SCOPED_TRACE("prompt length " + std::to_string(lens[b]));
    const auto toks = random_tokens(lens[b], 100 + b, V);
    cs[b] = cpu->new_sequence();
    cp[b] = &cs[b];
    PrefillOptions po;
    po.chunk_tokens = 50;
    ASSERT_TRUE(cpu->prefill(cs[b], toks, po).ok());
    auto id = gpu->new_sequence();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids[b] = id.value();
    ASSERT_OK(gpu->prefill(ids[b], toks, 24));
    EXPECT_EQ(gpu->position(ids[b]), lens[b]);
    SequenceState got;
    ASSERT_OK(gpu->download(ids[b], got));
    expect_state_close(got, cs[b]);
  }

  std::vector<float> ref(static_cast<size_t>(B) * V), got = nan_logits(B, V);
  ASSERT_TRUE(cpu->logits(cp, ref.data()).ok());
  ASSERT_OK(gpu->logits(ids, got.data()));
  EXPECT_TRUE(logits_close(got, ref, B, V)) << "after prefill";

  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("decode step " + std::to_string(step));
    std::vector<int32_t> next(B);
    for (int b = 0; b < B; ++b) next[b] = argmax(ref.data() + static_cast<size_t>(b) * V, V);
    ASSERT_TRUE(cpu->decode_step(cp, next, ref.data()).ok());
    got = nan_logits(B, V);
    ASSERT_OK(gpu->decode_step(ids, next, got.data()));
    EXPECT_TRUE(logits_close(got, ref, B, V));
  }
  // A sub-batch in another order: sequences advance independently.
  const std::vector<int> sub = {4, 1, 5};
  std::vector<SequenceState*> sp;
  std::vector<SeqId> sids;
  std::vector<int32_t> stoks;
  for (int i : sub) {
    sp.push_back(cp[i]);
    sids.push_back(ids[i]);
    stoks.push_back(static_cast<int32_t>((7 * i + 3) % V));
  }
  std::vector<float> sref(sub.size() * V), sgot = nan_logits(static_cast<int>(sub.size()), V);
  ASSERT_TRUE(cpu->decode_step(sp, stoks, sref.data()).ok());
  ASSERT_OK(gpu->decode_step(sids, stoks, sgot.data()));
  EXPECT_TRUE(logits_close(sgot, sref, static_cast<int>(sub.size()), V)) << "sub-batch";
  for (int b = 0; b < B; ++b) {
    SequenceState st;
    ASSERT_OK(gpu->download(ids[b], st));
    expect_state_close(st, cs[b]);
  }
}

// Forward (Score on the decode worker): every row's logits equal the CPU Model's full forward, the
// state equals a prefill's, it resumes after a prefill, and logits() goes on from it. Chunks that
// straddle blocks and the window.
TEST_P(CudaEngineTest, ForwardGivesEveryRowsLogitsAndThePrefillState) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  const int V = cpu->config().vocab_size;
  const auto toks = random_tokens(150, 900, V);
  std::vector<float> ref(toks.size() * V);
  ASSERT_TRUE(cpu->forward(toks, [&](int64_t pos0, int rows,
                                     const float* l) { std::memcpy(&ref[pos0 * V], l, sizeof(float) * rows * V); })
                  .ok());
  const auto gpu = engine(*cpu, small_options());
  ASSERT_TRUE(gpu);
  auto id = gpu->new_sequence();
  ASSERT_TRUE(id.ok());
  const std::span<const int32_t> all(toks);
  ASSERT_OK(gpu->prefill(id.value(), all.first(5), 0));
  std::vector<float> got((toks.size() - 5) * V, std::numeric_limits<float>::quiet_NaN());
  ASSERT_OK(gpu->forward(id.value(), all.subspan(5, 70), PrefillOptions{40, 64}, got.data()));
  ASSERT_OK(gpu->forward(id.value(), all.subspan(75), PrefillOptions{64, 64}, got.data() + 70 * V));
  const int rows = static_cast<int>(toks.size()) - 5;
  EXPECT_TRUE(logits_close(got, std::vector<float>(ref.begin() + 5 * V, ref.end()), rows, V));
  SequenceState st, cst = cpu->new_sequence();
  ASSERT_OK(gpu->download(id.value(), st));
  ASSERT_TRUE(cpu->prefill(cst, toks, PrefillOptions{}).ok());
  expect_state_close(st, cst);
  std::vector<float> last = nan_logits(1, V);
  const SeqId one[1] = {id.value()};
  ASSERT_OK(gpu->logits(one, last.data()));
  EXPECT_TRUE(logits_close(last, std::vector<float>(got.end() - V, got.end()), 1, V)) << "logits() after forward";
  ASSERT_OK(gpu->release(id.value()));
}

// A CPU-prefilled state uploaded and decoded on the GPU follows the CPU; a GPU state moved through
// download → upload (or the serialized hand-off) decodes bitwise like the original.
TEST_P(CudaEngineTest, UploadedStatesDecodeLikeTheirSource) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  const auto gpu = engine(*cpu, small_options());
  ASSERT_TRUE(gpu);
  const int V = cpu->config().vocab_size;
  const auto prompt = random_tokens(45, 7, V);

  SequenceState cs = cpu->new_sequence();
  ASSERT_TRUE(cpu->prefill(cs, prompt).ok());
  auto up = gpu->upload(cs);
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  SequenceState back;
  ASSERT_OK(gpu->download(up.value(), back));
  expect_same_state(back, cs);  // a plain copy both ways

  auto a = gpu->new_sequence();
  ASSERT_TRUE(a.ok());
  ASSERT_OK(gpu->prefill(a.value(), prompt, 20));
  SequenceState sa;
  ASSERT_OK(gpu->download(a.value(), sa));
  auto b = gpu->upload(sa);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  SequenceState restored = cpu->new_sequence();
  const auto blob = serialize_state(sa, cpu->config(), cpu->fingerprint());
  ASSERT_TRUE(deserialize_state(blob, cpu->config(), cpu->fingerprint(), restored).ok());
  auto c = gpu->upload(restored);
  ASSERT_TRUE(c.ok()) << c.status().to_string();

  SequenceState* one[1] = {&cs};
  std::vector<float> ref(V);
  ASSERT_TRUE(cpu->logits(one, ref.data()).ok());
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int32_t t = static_cast<int32_t>((step * 37 + 11) % V);
    const int32_t tok[1] = {t};
    ASSERT_TRUE(cpu->decode_step(one, tok, ref.data()).ok());
    std::vector<float> lu = nan_logits(1, V), la = nan_logits(1, V), lb = nan_logits(1, V), lc = nan_logits(1, V);
    const SeqId iu[1] = {up.value()}, ia[1] = {a.value()}, ib[1] = {b.value()}, ic[1] = {c.value()};
    ASSERT_OK(gpu->decode_step(iu, tok, lu.data()));
    ASSERT_OK(gpu->decode_step(ia, tok, la.data()));
    ASSERT_OK(gpu->decode_step(ib, tok, lb.data()));
    ASSERT_OK(gpu->decode_step(ic, tok, lc.data()));
    EXPECT_TRUE(logits_close(lu, ref, 1, V)) << "uploaded CPU state";
    EXPECT_TRUE(logits_close(la, ref, 1, V)) << "GPU prefill";
    EXPECT_TRUE(same_bits(la, lb)) << "download -> upload";
    EXPECT_TRUE(same_bits(la, lc)) << "serialized hand-off";
  }
  SequenceState sa2, sb2;
  ASSERT_OK(gpu->download(a.value(), sa2));
  ASSERT_OK(gpu->download(b.value(), sb2));
  expect_same_state(sa2, sb2);
  SequenceState su;
  ASSERT_OK(gpu->download(up.value(), su));
  expect_state_close(su, cs);

  // Bad shapes are refused before a slot is taken.
  const int free_before = gpu->free_sequences();
  SequenceState wrong = cs;
  wrong.self.pop_back();
  EXPECT_EQ(gpu->upload(wrong).status().code(), StatusCode::kInvalidArgument);
  wrong = cs;
  wrong.last_hidden.clear();
  EXPECT_EQ(gpu->upload(wrong).status().code(), StatusCode::kInvalidArgument);
  wrong = cs;
  wrong.k.resize(wrong.k.size() / 2);
  EXPECT_EQ(gpu->upload(wrong).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->free_sequences(), free_before);
}

TEST_P(CudaEngineTest, FullPoolIsResourceExhaustedAndChangesNothing) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  CudaEngineOptions o = small_options();
  o.kv_blocks = 4;  // 128 rows
  o.kv_block_size = 32;
  o.max_sequences = 3;
  const auto gpu = engine(*cpu, o);
  ASSERT_TRUE(gpu);
  const int V = cpu->config().vocab_size;

  SequenceState ca = cpu->new_sequence();
  const auto pa = random_tokens(70, 21, V);
  ASSERT_TRUE(cpu->prefill(ca, pa).ok());
  const SeqId A = gpu->new_sequence().value();
  ASSERT_OK(gpu->prefill(A, pa, 64));  // 3 blocks
  EXPECT_EQ(gpu->free_blocks(), 1);
  EXPECT_EQ(gpu->capacity(A), 96);
  EXPECT_EQ(gpu->reserve(A, 160).code(), StatusCode::kResourceExhausted);  // needs 2 more
  EXPECT_EQ(gpu->capacity(A), 96);
  EXPECT_EQ(gpu->free_blocks(), 1);
  EXPECT_EQ(gpu->reserve(A, -1).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(gpu->reserve(A, 50));  // never shrinks
  EXPECT_EQ(gpu->capacity(A), 96);
  const SeqId ia[1] = {A};
  std::vector<float> la0 = nan_logits(1, V), la1 = nan_logits(1, V);
  ASSERT_OK(gpu->logits(ia, la0.data()));

  const SeqId Bq = gpu->new_sequence().value();
  EXPECT_EQ(gpu->prefill(Bq, random_tokens(40, 22, V), 16).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(gpu->position(Bq), 0);
  EXPECT_EQ(gpu->free_blocks(), 1);
  ASSERT_OK(gpu->logits(ia, la1.data()));
  EXPECT_TRUE(same_bits(la0, la1));

  SequenceState cb = cpu->new_sequence();
  const auto pb = random_tokens(10, 23, V);
  ASSERT_TRUE(cpu->prefill(cb, pb).ok());
  ASSERT_OK(gpu->prefill(Bq, pb, 16));
  EXPECT_EQ(gpu->free_blocks(), 0);

  // A fills its third block (positions 70..95).
  SequenceState* oa[1] = {&ca};
  std::vector<float> ref(V), got = nan_logits(1, V);
  for (int p = 70; p < 96; ++p) {
    const int32_t tok[1] = {static_cast<int32_t>(p % V)};
    ASSERT_TRUE(cpu->decode_step(oa, tok, ref.data()).ok());
    ASSERT_OK(gpu->decode_step(ia, tok, got.data()));
  }
  EXPECT_TRUE(logits_close(got, ref, 1, V));
  ASSERT_EQ(gpu->position(A), 96);

  // Position 96 needs a fourth block: the whole batch is refused, nothing moves.
  const SeqId both[2] = {Bq, A};
  const int32_t toks2[2] = {5, 6};
  std::vector<float> lb0 = nan_logits(1, V), lb1 = nan_logits(1, V);
  const SeqId ib[1] = {Bq};
  ASSERT_OK(gpu->logits(ib, lb0.data()));
  ASSERT_OK(gpu->logits(ia, la0.data()));
  EXPECT_EQ(gpu->decode_step(both, toks2, nan_logits(2, V).data()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(gpu->position(A), 96);
  EXPECT_EQ(gpu->position(Bq), 10);
  ASSERT_OK(gpu->logits(ib, lb1.data()));
  ASSERT_OK(gpu->logits(ia, la1.data()));
  EXPECT_TRUE(same_bits(lb0, lb1));
  EXPECT_TRUE(same_bits(la0, la1));

  // B alone still has room; releasing B frees its block for A.
  SequenceState* ob[1] = {&cb};
  const int32_t tb[1] = {5};
  ASSERT_TRUE(cpu->decode_step(ob, tb, ref.data()).ok());
  ASSERT_OK(gpu->decode_step(ib, tb, got.data()));
  EXPECT_TRUE(logits_close(got, ref, 1, V)) << "B after the refused batch";
  ASSERT_OK(gpu->release(Bq));
  EXPECT_EQ(gpu->free_blocks(), 1);
  const int32_t ta[1] = {6};
  ASSERT_TRUE(cpu->decode_step(oa, ta, ref.data()).ok());
  ASSERT_OK(gpu->decode_step(ia, ta, got.data()));
  EXPECT_TRUE(logits_close(got, ref, 1, V)) << "A in its fourth block";
  EXPECT_EQ(gpu->free_blocks(), 0);

  // Slots run out too; bad arguments are named.
  ASSERT_TRUE(gpu->new_sequence().ok());
  const SeqId empty = gpu->new_sequence().value();
  EXPECT_EQ(gpu->new_sequence().status().code(), StatusCode::kResourceExhausted);
  const SeqId ie[1] = {empty};
  EXPECT_EQ(gpu->logits(ie, got.data()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu->release(o.max_sequences).code(), StatusCode::kNotFound);
  EXPECT_EQ(gpu->release(-1).code(), StatusCode::kNotFound);
  const int32_t bad_tok[1] = {V};
  EXPECT_EQ(gpu->decode_step(ie, bad_tok, got.data()).code(), StatusCode::kInvalidArgument);
  const SeqId dup[2] = {A, A};
  EXPECT_EQ(gpu->decode_step(dup, toks2, nan_logits(2, V).data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->prefill(empty, pb, o.max_chunk_tokens + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->position(A), 97);
}

// Prefill-only weights (a prefill worker): the same self-decoder state, and no logits.
TEST_P(CudaEngineTest, PrefillOnlyWeightsGiveTheSameState) {
  SKIP_WITHOUT_GPU();
  const auto full = load(WeightSet::kFull);
  const auto pre = load(WeightSet::kPrefill);
  ASSERT_TRUE(full && pre);
  const auto gf = engine(*full, small_options());
  const auto gp = engine(*pre, small_options());
  ASSERT_TRUE(gf && gp);
  EXPECT_FALSE(gp->has_cross_decoder());
  const auto toks = random_tokens(77, 9, full->config().vocab_size);
  const SeqId f = gf->new_sequence().value(), p = gp->new_sequence().value();
  ASSERT_OK(gf->prefill(f, toks, 32));
  ASSERT_OK(gp->prefill(p, toks, 32));
  SequenceState sf, sp;
  ASSERT_OK(gf->download(f, sf));
  ASSERT_OK(gp->download(p, sp));
  expect_same_state(sf, sp);
  const SeqId ip[1] = {p};
  std::vector<float> out(full->config().vocab_size);
  EXPECT_EQ(gp->logits(ip, out.data()).code(), StatusCode::kFailedPrecondition);

  // read_rows (rows crossing block edges) and a download without rows: the same bytes.
  const int KV = full->config().kv_dim();
  std::vector<float> k(40 * KV), v(40 * KV);
  ASSERT_OK(gp->read_rows(p, 5, 40, k.data(), v.data()));
  EXPECT_EQ(0, std::memcmp(k.data(), sp.k.data() + 5 * KV, k.size() * 4));
  EXPECT_EQ(0, std::memcmp(v.data(), sp.v.data() + 5 * KV, v.size() * 4));
  EXPECT_EQ(gp->read_rows(p, 70, 8, k.data(), v.data()).code(), StatusCode::kInvalidArgument);
  SequenceState no_rows;
  ASSERT_OK(gp->download(p, no_rows, /*with_kv=*/false));
  EXPECT_TRUE(no_rows.k.empty() && no_rows.v.empty());
  no_rows.k = sp.k;
  no_rows.v = sp.v;
  expect_same_state(no_rows, sp);
}

// decode_step through CUDA graphs (eager once per shape, then captured, then replayed) gives the
// eager engine's logits bitwise, also when the longest sequence crosses a length bucket (512).
TEST_P(CudaEngineTest, GraphDecodeEqualsEager) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  CudaEngineOptions o = small_options();
  const auto eager = engine(*cpu, o);
  o.cuda_graphs = true;
  const auto graph = engine(*cpu, o);
  ASSERT_TRUE(eager && graph);
  const int V = cpu->config().vocab_size;
  const std::vector<int> lens = {5, 40, 505};
  std::vector<SeqId> ie, ig;
  for (size_t i = 0; i < lens.size(); ++i) {
    const auto toks = random_tokens(lens[i], 300 + static_cast<uint32_t>(i), V);
    ie.push_back(eager->new_sequence().value());
    ig.push_back(graph->new_sequence().value());
    ASSERT_OK(eager->prefill(ie.back(), toks, 64));
    ASSERT_OK(graph->prefill(ig.back(), toks, 64));
  }
  auto step = [&](std::span<const SeqId> a, std::span<const SeqId> b, int t) {
    const int B = static_cast<int>(a.size());
    std::vector<int32_t> toks(B);
    for (int i = 0; i < B; ++i) toks[i] = static_cast<int32_t>((t * 13 + i * 5) % V);
    std::vector<float> le = nan_logits(B, V), lg = nan_logits(B, V);
    ASSERT_OK(eager->decode_step(a, toks, le.data()));
    ASSERT_OK(graph->decode_step(b, toks, lg.data()));
    EXPECT_TRUE(same_bits(le, lg)) << "step " << t << ", batch " << B;
  };
  for (int t = 0; t < 10; ++t) step(ie, ig, t);  // the 505-token sequence passes 512
  const std::vector<SeqId> se = {ie[2], ie[0]}, sg = {ig[2], ig[0]};
  for (int t = 10; t < 14; ++t) step(se, sg, t);
  for (size_t i = 0; i < ie.size(); ++i) {
    SequenceState a, b;
    ASSERT_OK(eager->download(ie[i], a));
    ASSERT_OK(graph->download(ig[i], b));
    expect_same_state(a, b);
  }
}

// Engine::fork on the device (docs/design.md §3.4): a prompt prefilled once and forked decodes
// bitwise like sequences prefilled separately (same kernels, same batch); forks share the
// prompt's whole blocks and copy the partial last one; the leader can go first; all blocks
// come back.
TEST_P(CudaEngineTest, ForksDecodeLikeSeparatePrefills) {
  SKIP_WITHOUT_GPU();
  const auto cpu = load();
  ASSERT_TRUE(cpu);
  const CudaEngineOptions o = small_options();  // 32-row blocks
  const auto gpu = engine(*cpu, o);
  ASSERT_TRUE(gpu);
  const int V = cpu->config().vocab_size;
  EXPECT_EQ(gpu->fork(7).status().code(), StatusCode::kNotFound);
  for (int P : {45, 64}) {
    SCOPED_TRACE("prompt " + std::to_string(P));
    const auto prompt = random_tokens(P, 400 + static_cast<uint32_t>(P), V);
    std::vector<SeqId> separate, forked;
    for (int b = 0; b < 3; ++b) {
      separate.push_back(gpu->new_sequence().value());
      ASSERT_OK(gpu->prefill(separate.back(), prompt, 64));
    }
    forked.push_back(gpu->new_sequence().value());
    ASSERT_OK(gpu->prefill(forked[0], prompt, 64));
    const int before = gpu->free_blocks();
    for (int b = 1; b < 3; ++b) {
      auto f = gpu->fork(forked[0]);
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      EXPECT_EQ(gpu->position(*f), P);
      forked.push_back(*f);
    }
    EXPECT_EQ(before - gpu->free_blocks(), P % 32 != 0 ? 2 : 0);
    for (int t = 0; t < 24; ++t) {                    // crosses a block boundary
      const int n = static_cast<int>(forked.size());  // 3, then 2 once the leader is gone
      std::vector<int32_t> toks(n);
      for (int i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((t * 13 + i * 5) % V);
      std::vector<float> want = nan_logits(n, V), got = nan_logits(n, V);
      ASSERT_OK(gpu->decode_step(separate, toks, want.data()));
      ASSERT_OK(gpu->decode_step(forked, toks, got.data()));
      EXPECT_TRUE(same_bits(want, got)) << "step " << t;
      if (t == 10) {  // the leader goes first; the others go on alone
        ASSERT_OK(gpu->release(forked[0]));
        ASSERT_OK(gpu->release(separate[0]));
        forked.erase(forked.begin());
        separate.erase(separate.begin());
      }
    }
    for (size_t i = 0; i < forked.size(); ++i) {
      SequenceState a, b;
      ASSERT_OK(gpu->download(separate[i], a));
      ASSERT_OK(gpu->download(forked[i], b));
      expect_same_state(a, b);
      ASSERT_OK(gpu->release(separate[i]));
      ASSERT_OK(gpu->release(forked[i]));
    }
    EXPECT_EQ(gpu->free_blocks(), o.kv_blocks);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaEngineTest, ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou", "gqa3-gret"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --- a mixture of experts (docs/design.md §2.2) --------------------------------------------------------------
// On the golden MoE models (tests/reference/goldens/moe_*), drawn with every routing decision 5%
// clear of a tie: on a random model some token's k-th and (k+1)-th experts nearly tie, and the
// engine's bf16 activations may choose the other one, a difference far over the bar for that
// token. Two sequences prefilled in chunks, then decode steps of both with the golden tokens.
class CudaEngineMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineMoe, MatchesCpuModelOnTheGoldenModels) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::goldens_dir() + "/" + GetParam();
  const auto cpu = load_cpu_mirror(dir);
  ASSERT_TRUE(cpu);
  auto j = Json::parse(test::read_file(dir + "/golden.json"));
  ASSERT_TRUE(j.ok());
  std::vector<int32_t> t;
  for (const auto& x : j->find("tokens")->as_array()) t.push_back(static_cast<int32_t>(x.as_int()));
  CudaEngineOptions o;
  o.max_sequences = 4;
  o.max_batch = 4;
  o.max_chunk_tokens = 64;
  o.max_context = 1024;
  o.kv_blocks = 64;
  o.kv_block_size = 32;
  auto made = cuda_engine_of(dir, WeightSet::kFull, o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaEngine& gpu = **made;
  const int V = cpu->config().vocab_size;
  const size_t n0[2] = {t.size() - 6, t.size() - 9};
  std::vector<SequenceState> cs(2);
  std::vector<SequenceState*> cp;
  std::vector<SeqId> ids;
  for (int b = 0; b < 2; ++b) {
    cs[b] = cpu->new_sequence();
    cp.push_back(&cs[b]);
    PrefillOptions po;
    po.chunk_tokens = 5;
    ASSERT_TRUE(cpu->prefill(cs[b], std::span(t).first(n0[b]), po).ok());
    auto id = gpu.new_sequence();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(*id);
    ASSERT_OK(gpu.prefill(*id, std::span(t).first(n0[b]), 5));
  }
  std::vector<float> ref(2 * static_cast<size_t>(V)), got = nan_logits(2, V);
  ASSERT_TRUE(cpu->logits(cp, ref.data()).ok());
  ASSERT_OK(gpu.logits(ids, got.data()));
  EXPECT_TRUE(logits_close(got, ref, 2, V)) << "after prefill";
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("decode step " + std::to_string(step));
    const std::vector<int32_t> next = {t[n0[0] + step], t[n0[1] + step]};
    ASSERT_TRUE(cpu->decode_step(cp, next, ref.data()).ok());
    got = nan_logits(2, V);
    ASSERT_OK(gpu.decode_step(ids, next, got.data()));
    EXPECT_TRUE(logits_close(got, ref, 2, V));
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaEngineMoe,
                         ::testing::Values("moe_gret_shared", "moe_yocou_swa_t3_nope", "moe_swa_k1_shared_norm"));

// --- the Transformer baseline (docs/design.md §2.6) ------------------------------------------------------------
// The same engine on arch "transformer" (tiny-transformer: 4 layers, GQA 4/2) against the CPU Model:
// logits after prefill and over decode steps (the kLogprobTol above), the per-layer K/V rows and
// last_hidden (download; the pool row layout is the CPU state's), chunked = one-shot prefill,
// a CPU-prefilled state uploaded and decoded, and the pool's byte accounting. Not parameterized:
// transformer states have no serialized hand-off (model/state.h), which the suite above uses.
class CudaTransformerEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda::device_count() == 0) return;
    dir_ = new test::TempDir();
    ASSERT_TRUE(write_random_model(dir_->sub("t"), find_preset("tiny-transformer").value(), 43, DType::kF32).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static test::TempDir* dir_;
};
test::TempDir* CudaTransformerEngineTest::dir_ = nullptr;

TEST_F(CudaTransformerEngineTest, MatchesCpuModel) {
  SKIP_WITHOUT_GPU();
  const auto cpu_r = load_cpu_mirror(dir_->sub("t"));
  ASSERT_TRUE(cpu_r);
  const Model& cpu = *cpu_r;
  const ModelConfig& c = cpu.config();
  ASSERT_EQ(c.arch, Arch::kTransformer);
  CudaEngineOptions o;
  o.max_sequences = 8;
  o.max_batch = 8;
  o.max_chunk_tokens = 64;
  o.max_context = 1024;
  o.kv_blocks = 64;
  o.kv_block_size = 64;
  auto gpu_r = cuda_engine_of(dir_->sub("t"), WeightSet::kFull, o);
  ASSERT_TRUE(gpu_r.ok()) << gpu_r.status().to_string();
  CudaEngine& gpu = **gpu_r;
  const int V = c.vocab_size;
  EXPECT_EQ(gpu.kv_bytes_per_token(), c.kv_bytes_per_token());
  EXPECT_EQ(gpu.kv_bytes_per_token(), int64_t{2} * c.n_layers * c.kv_dim() * 4);

  const std::vector<int> lens = {1, 7, 33, 64, 100, 161};
  const int B = static_cast<int>(lens.size());
  std::vector<SequenceState> cs(B);
  std::vector<SequenceState*> cp(B);
  std::vector<SeqId> ids(B);
  int64_t blocks = 0;
  for (int b = 0; b < B; ++b) {
    SCOPED_TRACE("prompt length " + std::to_string(lens[b]));
    const auto toks = random_tokens(lens[b], 300 + b, V);
    cs[b] = cpu.new_sequence();
    cp[b] = &cs[b];
    PrefillOptions po;
    po.chunk_tokens = 50;
    ASSERT_TRUE(cpu.prefill(cs[b], toks, po).ok());
    auto id = gpu.new_sequence();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids[b] = id.value();
    ASSERT_OK(gpu.prefill(ids[b], toks, 24));
    blocks += (lens[b] + o.kv_block_size - 1) / o.kv_block_size;
    SequenceState got;
    ASSERT_OK(gpu.download(ids[b], got));
    expect_state_close(got, cs[b]);
  }
  EXPECT_EQ(gpu.kv_bytes_used(), blocks * o.kv_block_size * gpu.kv_bytes_per_token());
  std::vector<float> kk(c.n_layers * c.kv_dim()), vv(kk.size());
  EXPECT_EQ(gpu.read_rows(ids[0], 0, 1, kk.data(), vv.data()).code(), StatusCode::kUnimplemented);

  std::vector<float> ref(static_cast<size_t>(B) * V), got = nan_logits(B, V);
  ASSERT_TRUE(cpu.logits(cp, ref.data()).ok());
  ASSERT_OK(gpu.logits(ids, got.data()));
  EXPECT_TRUE(logits_close(got, ref, B, V)) << "after prefill";
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("decode step " + std::to_string(step));
    std::vector<int32_t> next(B);
    for (int b = 0; b < B; ++b) next[b] = argmax(ref.data() + static_cast<size_t>(b) * V, V);
    ASSERT_TRUE(cpu.decode_step(cp, next, ref.data()).ok());
    got = nan_logits(B, V);
    ASSERT_OK(gpu.decode_step(ids, next, got.data()));
    EXPECT_TRUE(logits_close(got, ref, B, V));
  }
  for (int b = 0; b < B; ++b) {
    SequenceState st;
    ASSERT_OK(gpu.download(ids[b], st));
    expect_state_close(st, cs[b]);
  }
  for (SeqId id : ids) ASSERT_OK(gpu.release(id));
  EXPECT_EQ(gpu.kv_bytes_used(), 0);

  // Chunked prefill equals one shot (and the CPU); a CPU state uploaded decodes like the CPU.
  const auto toks = random_tokens(161, 400, V);
  auto a = gpu.new_sequence(), b1 = gpu.new_sequence();
  ASSERT_TRUE(a.ok() && b1.ok());
  ASSERT_OK(gpu.prefill(a.value(), toks, 17));
  ASSERT_OK(gpu.prefill(b1.value(), toks, 64));
  SequenceState cst = cpu.new_sequence();
  ASSERT_TRUE(cpu.prefill(cst, toks, PrefillOptions{}).ok());
  auto up = gpu.upload(cst);
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  const std::vector<SeqId> three = {a.value(), b1.value(), up.value()};
  std::vector<float> g3 = nan_logits(3, V), r1(V);
  SequenceState* one[1] = {&cst};
  ASSERT_TRUE(cpu.logits(one, r1.data()).ok());
  ASSERT_OK(gpu.logits(three, g3.data()));
  std::vector<float> rep3;
  for (int i = 0; i < 3; ++i) rep3.insert(rep3.end(), r1.begin(), r1.end());
  EXPECT_TRUE(logits_close(g3, rep3, 3, V)) << "chunk 17, chunk 64, uploaded";
  const std::vector<float> chunked(g3.begin(), g3.begin() + V), whole(g3.begin() + V, g3.begin() + 2 * V);
  EXPECT_TRUE(logits_close(chunked, whole, 1, V)) << "chunked vs one shot";
  std::vector<int32_t> next(1, argmax(r1.data(), V));
  ASSERT_TRUE(cpu.decode_step(one, next, r1.data()).ok());
  std::vector<float> g1 = nan_logits(1, V);
  const SeqId upid[1] = {up.value()};
  ASSERT_OK(gpu.decode_step(upid, next, g1.data()));
  EXPECT_TRUE(logits_close(g1, r1, 1, V)) << "uploaded, one decode step";
}

}  // namespace
}  // namespace yoco
