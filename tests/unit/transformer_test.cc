// The Transformer baseline (docs/design.md §2.6) in the CPU engine: prefill + decode = full forward at
// every position, chunked prefill = one shot, paged = contiguous bitwise, batched decode = one
// at a time, the random presets round trip, bad tensors are named, and the serving paths that
// do not take a transformer say so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/cpu/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/safetensors.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

class TransformerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    auto cfg = find_preset("tiny-transformer");
    ASSERT_TRUE(cfg.ok());
    ASSERT_TRUE(write_random_model(dir_->sub("m"), cfg.value(), 42, DType::kF32).ok());
    auto m = Model::load(dir_->sub("m"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
    model_ = nullptr;
    dir_ = nullptr;
  }
  static std::vector<int32_t> tokens(int n, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(g() % model_->config().vocab_size);
    return t;
  }
  static std::vector<float> all_logits(std::span<const int32_t> toks, int chunk = 512) {
    const int V = model_->config().vocab_size;
    std::vector<float> out(toks.size() * V);
    PrefillOptions opt;
    opt.chunk_tokens = chunk;
    EXPECT_TRUE(model_
                    ->forward(
                        toks,
                        [&](int64_t pos0, int rows, const float* l) {
                          std::memcpy(&out[pos0 * V], l, sizeof(float) * rows * V);
                        },
                        opt)
                    .ok());
    return out;
  }
  // Every layer's K and V rows of tokens [0, position), in token order.
  static std::vector<float> layer_rows(const SequenceState& st) {
    const ModelConfig& c = model_->config();
    std::vector<float> out;
    for (int64_t r = 0; r < st.position; ++r)
      for (int l = 0; l < c.n_layers; ++l)
        for (const float* p :
             {st.layer_k_row(r, l, c.n_layers, c.kv_dim()), st.layer_v_row(r, l, c.n_layers, c.kv_dim())})
          out.insert(out.end(), p, p + c.kv_dim());
    return out;
  }
  static test::TempDir* dir_;
  static Model* model_;
};
test::TempDir* TransformerTest::dir_ = nullptr;
Model* TransformerTest::model_ = nullptr;

TEST_F(TransformerTest, ConfigAndStateShape) {
  const ModelConfig& c = model_->config();
  EXPECT_TRUE(c.is_transformer());
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.kv_row_floats(), 4 * 32);
  EXPECT_EQ(model_->kv_row_floats(), 4 * 32);
  EXPECT_EQ(c.kv_bytes_per_token(), 4 * 2 * 32 * 4);
  EXPECT_EQ(find_preset("tiny-gret")->kv_bytes_per_token(), 2 * 32 * 4);
  SequenceState st = model_->new_sequence();
  EXPECT_TRUE(st.self.empty());
  ASSERT_TRUE(model_->prefill(st, tokens(33, 1)).ok());
  EXPECT_EQ(st.position, 33);
  EXPECT_EQ(st.k.size(), static_cast<size_t>(64) * c.kv_row_floats());  // whole chunks of kKvChunkRows
  EXPECT_EQ(st.last_hidden.size(), static_cast<size_t>(c.dim));
}

TEST_F(TransformerTest, PrefillPlusDecodeStepsEqualFullForward) {
  const int V = model_->config().vocab_size;
  const auto toks = tokens(75, 2);
  const auto full = all_logits(toks);
  EXPECT_LT(test::max_abs_diff(full.data(), all_logits(toks, 7).data(), full.size()), 1e-4);  // chunking
  auto score = model_->score(toks);
  ASSERT_TRUE(score.ok());
  for (int n0 : {1, 10, 33}) {
    SequenceState st = model_->new_sequence();
    SequenceState* one[1] = {&st};
    std::vector<float> logits(V);
    PrefillOptions opt;
    opt.chunk_tokens = 7;
    ASSERT_TRUE(model_->prefill(st, std::span(toks).first(n0), opt).ok());
    ASSERT_TRUE(model_->logits(one, logits.data()).ok());
    EXPECT_LT(test::max_abs_diff(logits.data(), &full[static_cast<size_t>(n0 - 1) * V], V), 1e-4) << "pos " << n0 - 1;
    for (size_t p = n0; p < toks.size(); ++p) {
      const int32_t t[1] = {toks[p]};
      ASSERT_TRUE(model_->decode_step(one, t, logits.data()).ok());
      ASSERT_LT(test::max_abs_diff(logits.data(), &full[p * V], V), 1e-4) << "pos " << p << " n0 " << n0;
      if (p + 1 < toks.size()) {  // score = log-softmax of the same logits
        std::vector<float> row = logits;
        cpu::log_softmax(row.data(), V);
        EXPECT_NEAR(row[toks[p + 1]], (*score)[p], 1e-4) << "pos " << p;
      }
    }
  }
}

TEST_F(TransformerTest, ChunkedAndResumedPrefillEqualsOneShot) {
  const auto toks = tokens(90, 3);
  SequenceState one_shot = model_->new_sequence();
  ASSERT_TRUE(model_->prefill(one_shot, toks).ok());
  const auto want = layer_rows(one_shot);
  for (int chunk : {1, 7, 64}) {
    for (size_t split : {size_t{1}, size_t{20}, size_t{77}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " split " + std::to_string(split));
      PrefillOptions opt;
      opt.chunk_tokens = chunk;
      SequenceState first = model_->new_sequence();
      ASSERT_TRUE(model_->prefill(first, std::span(toks).first(split), opt).ok());
      SequenceState resumed = first;  // a state handed on between calls
      ASSERT_TRUE(model_->prefill(resumed, std::span(toks).subspan(split), opt).ok());
      ASSERT_EQ(resumed.position, one_shot.position);
      const auto got = layer_rows(resumed);
      EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-4);
      EXPECT_LT(
          test::max_abs_diff(resumed.last_hidden.data(), one_shot.last_hidden.data(), one_shot.last_hidden.size()),
          1e-3);
    }
  }
}

TEST_F(TransformerTest, PagedStateDecodesBitwiseLikeContiguous) {
  const ModelConfig& c = model_->config();
  const int V = c.vocab_size;
  // Blocks of 64 rows (two chunks each); the sequence's blocks are not adjacent.
  auto pool = KvPool::create(16, 64, model_->kv_row_floats());
  ASSERT_TRUE(pool.ok());
  KvPages pages = (*pool)->new_pages(), decoy = (*pool)->new_pages();
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE((*pool)->reserve(pages, 64 * i).ok());
    ASSERT_TRUE((*pool)->reserve(decoy, 64 * i).ok());
  }
  ASSERT_NE(pages.blocks[1], pages.blocks[0] + 1);

  const auto toks = tokens(70, 4);
  SequenceState contiguous = model_->new_sequence(), paged = model_->new_sequence();
  paged.pages = pages;
  PrefillOptions opt;
  opt.chunk_tokens = 16;
  ASSERT_TRUE(model_->prefill(contiguous, toks, opt).ok());
  ASSERT_TRUE(model_->prefill(paged, toks, opt).ok());
  EXPECT_TRUE(paged.k.empty());
  const auto rc = layer_rows(contiguous), rp = layer_rows(paged);
  ASSERT_EQ(rc.size(), rp.size());
  EXPECT_EQ(0, std::memcmp(rc.data(), rp.data(), rc.size() * 4));
  SequenceState* pc[1] = {&contiguous};
  SequenceState* pp[1] = {&paged};
  std::vector<float> lc(V), lp(V);
  ASSERT_TRUE(model_->logits(pc, lc.data()).ok());
  ASSERT_TRUE(model_->logits(pp, lp.data()).ok());
  for (int step = 0; step < 40; ++step) {  // 70 → 110 tokens: across a chunk (96) and a block (128)
    ASSERT_EQ(0, std::memcmp(lc.data(), lp.data(), lc.size() * 4)) << "step " << step;
    const int32_t t[1] = {static_cast<int32_t>(std::max_element(lc.begin(), lc.end()) - lc.begin())};
    ASSERT_TRUE(model_->decode_step(pc, t, lc.data()).ok());
    ASSERT_TRUE(model_->decode_step(pp, t, lp.data()).ok());
  }
  // Full blocks: RESOURCE_EXHAUSTED before anything is consumed.
  SequenceState small = model_->new_sequence();
  small.pages = (*pool)->new_pages();
  ASSERT_TRUE((*pool)->reserve(*small.pages, 64).ok());
  EXPECT_EQ(model_->prefill(small, tokens(65, 5)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(small.position, 0);
  // Pages cut for another row width are refused.
  auto yoco_pool = KvPool::create(4, 64, c.kv_dim());
  ASSERT_TRUE(yoco_pool.ok());
  SequenceState wrong = model_->new_sequence();
  wrong.pages = (*yoco_pool)->new_pages();
  ASSERT_TRUE((*yoco_pool)->reserve(*wrong.pages, 64).ok());
  EXPECT_EQ(model_->prefill(wrong, tokens(3, 6)).code(), StatusCode::kInvalidArgument);
}

TEST_F(TransformerTest, BatchedDecodeEqualsOneAtATime) {
  const int V = model_->config().vocab_size;
  const std::vector<int> lens = {3, 17, 40, 1, 25, 32};
  std::vector<SequenceState> batch, single;
  for (size_t i = 0; i < lens.size(); ++i) {
    batch.push_back(model_->new_sequence());
    ASSERT_TRUE(model_->prefill(batch.back(), tokens(lens[i], 10 + static_cast<uint32_t>(i))).ok());
    single.push_back(batch.back());
  }
  std::vector<SequenceState*> ptrs;
  for (auto& s : batch) ptrs.push_back(&s);
  std::vector<float> lb(lens.size() * V), ls(V);
  ASSERT_TRUE(model_->logits(ptrs, lb.data()).ok());
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> next(lens.size());
    for (size_t i = 0; i < lens.size(); ++i) next[i] = static_cast<int32_t>((step * 31 + i * 7) % V);
    ASSERT_TRUE(model_->decode_step(ptrs, next, lb.data()).ok());
    for (size_t i = 0; i < lens.size(); ++i) {
      SequenceState* one[1] = {&single[i]};
      const int32_t t[1] = {next[i]};
      ASSERT_TRUE(model_->decode_step(one, t, ls.data()).ok());
      ASSERT_LT(test::max_abs_diff(ls.data(), &lb[i * V], V), 1e-5) << "seq " << i << " step " << step;
    }
  }
}

TEST_F(TransformerTest, RandomModelRoundTripsAndPresetsHaveTheBaselineSizes) {
  auto again = Model::load(dir_->sub("m"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), model_->fingerprint());
  auto params = Json::parse(test::read_file(dir_->sub("m/params.json")));
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->find("arch")->as_string(), "transformer");
  EXPECT_EQ(params->find("n_self_heads"), nullptr);
  auto reparsed = parse_model_config(params.value());
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(reparsed->to_json().dump(), model_->config().to_json().dump());
  EXPECT_FALSE(model_->weights().tied);
  // Same seed, same bytes; the weights are docs/design.md §2.6's tensors.
  ASSERT_TRUE(write_random_model(dir_->sub("m2"), find_preset("tiny-transformer").value(), 42, DType::kF32).ok());
  EXPECT_EQ(test::read_file(dir_->sub("m/model.safetensors")), test::read_file(dir_->sub("m2/model.safetensors")));
  auto file = SafetensorsFile::open(dir_->sub("m/model.safetensors"));
  ASSERT_TRUE(file.ok());
  const TensorInfo* k = (*file)->header().find("layers.3.mixer.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ((*file)->header().find("cross_decoder.k_proj.weight"), nullptr);
  // A bf16 copy loads and scores close to the f32 model's.
  ASSERT_TRUE(write_random_model(dir_->sub("bf16"), find_preset("tiny-transformer").value(), 42, DType::kBF16).ok());
  auto bf = Model::load(dir_->sub("bf16"));
  ASSERT_TRUE(bf.ok()) << bf.status().to_string();
  const auto toks = tokens(20, 7);
  auto a = model_->score(toks), b = (*bf)->score(toks);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(test::max_abs_diff(a->data(), b->data(), a->size()), 0.1);
  // Tied embeddings: no output_projection.weight, the head reads embed_tokens.
  ModelConfig tied_cfg = find_preset("tiny-transformer").value();
  tied_cfg.tie_embeddings = true;
  ASSERT_TRUE(write_random_model(dir_->sub("tied"), tied_cfg, 42, DType::kF32).ok());
  auto tied = Model::load(dir_->sub("tied"));
  ASSERT_TRUE(tied.ok()) << tied.status().to_string();
  EXPECT_TRUE((*tied)->weights().tied);
  EXPECT_TRUE((*tied)->weights().output.empty());
  auto st = (*tied)->score(toks);
  ASSERT_TRUE(st.ok());
  EXPECT_GT(test::max_abs_diff(st->data(), a->data(), a->size()), 1e-3);  // a different head
  // The benchmark presets are YOCO's sizes with the baseline's arch.
  for (auto [tf, yoco] : {std::pair{"transformer-3b", "yoco-3b"}, std::pair{"small-transformer", "small-gret"}}) {
    const ModelConfig t = find_preset(tf).value(), y = find_preset(yoco).value();
    EXPECT_TRUE(t.is_transformer()) << tf;
    EXPECT_EQ(t.dim, y.dim);
    EXPECT_EQ(t.n_layers, y.n_layers);
    EXPECT_EQ(t.hidden_dim, y.hidden_dim);
    EXPECT_EQ(t.n_attn_heads, y.n_attn_heads);
    EXPECT_EQ(t.n_attn_kv_heads, y.n_attn_kv_heads);
    EXPECT_EQ(t.vocab_size, y.vocab_size);
    EXPECT_EQ(t.kv_bytes_per_token(), y.kv_bytes_per_token() * y.n_layers) << tf;
  }
}

TEST_F(TransformerTest, PrefillWeightsHaveEveryLayerButNoHead) {
  auto pre = Model::load(dir_->sub("m"), WeightSet::kPrefill);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ((*pre)->fingerprint(), model_->fingerprint());
  const auto toks = tokens(30, 8);
  SequenceState a = model_->new_sequence(), b = (*pre)->new_sequence();
  ASSERT_TRUE(model_->prefill(a, toks).ok());
  ASSERT_TRUE((*pre)->prefill(b, toks).ok());
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.last_hidden, b.last_hidden);
  SequenceState* pb[1] = {&b};
  std::vector<float> logits(model_->config().vocab_size);
  EXPECT_EQ((*pre)->logits(pb, logits.data()).code(), StatusCode::kFailedPrecondition);
}

TEST_F(TransformerTest, BadTensorsAreNamed) {
  const std::string params = test::read_file(dir_->sub("m/params.json"));
  const std::string weights = test::read_file(dir_->sub("m/model.safetensors"));
  uint64_t hlen = 0;
  std::memcpy(&hlen, weights.data(), 8);
  const std::string header = weights.substr(8, hlen), data = weights.substr(8 + hlen);
  auto load_edited = [&](const std::string& from, const std::string& to, size_t after = 0) {
    std::string h = header;
    const size_t at = h.find(from, after);
    EXPECT_NE(at, std::string::npos) << from;
    h.replace(at, from.size(), to);
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    static int n = 0;
    const std::string d = dir_->sub("bad" + std::to_string(n++));
    std::filesystem::create_directories(d);
    test::write_file(d + "/params.json", params);
    test::write_file(d + "/model.safetensors", out + h + data);
    auto m = Model::load(d);
    return m.ok() ? Status::Ok() : m.status();
  };
  Status s = load_edited("\"layers.2.mixer.v_proj.weight\"", "\"layers.2.mixer.w_proj.weight\"");
  EXPECT_NE(s.message().find("missing tensor \"layers.2.mixer.v_proj.weight\""), std::string::npos) << s.message();
  // k_proj [32, 64] declared as [64, 32]: same bytes, wrong shape.
  const size_t key = header.find("\"layers.1.mixer.k_proj.weight\"");
  s = load_edited("\"shape\":[32,64]", "\"shape\":[64,32]", key);
  EXPECT_NE(s.message().find("tensor \"layers.1.mixer.k_proj.weight\" has shape [64, 32], expected [32, 64]"),
            std::string::npos)
      << s.message();
}

TEST_F(TransformerTest, ServingPathsThatDoNotTakeATransformerSaySo) {
  const ModelConfig& c = model_->config();
  SequenceState out;
  const std::vector<uint8_t> blob(200, 0);
  auto r = deserialize_state(blob, c, model_->fingerprint(), out);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("transformer"), std::string::npos);
  TensorParallel tp;
  tp.world = 2;
  auto m = Model::load(dir_->sub("m"), WeightSet::kFull, tp);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("transformer"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace yoco
