// prefill_service/prompt_cache.h, the PromptCache policy alone (no scheduler, no transfer): where
// slices stop, what a job stores at its stops and end, and where the next prompt resumes.
#include "prefill_service/prompt_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv_store/factory.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

constexpr int kBlock = 16;

// One random model for the whole binary (writing it is the slow part).
const Model& shared_model() {
  static test::TempDir dir;
  static const std::unique_ptr<Model> model = [] {
    YOCO_CHECK(write_random_model(dir.path(), find_preset("tiny-gret").value(), 7, DType::kF32).ok());
    return std::move(Model::load(dir.path(), WeightSet::kPrefill).value());
  }();
  return *model;
}

// The model and an empty memory store behind a KV cache of kBlock-token blocks.
struct Fixture {
  const Model* model = &shared_model();
  std::unique_ptr<KvStore> store;
  std::unique_ptr<KvCache> cache;

  Fixture() {
    store = std::move(make_kv_store("memory:64MiB").value());
    KvCacheOptions o;
    o.fingerprint = model->fingerprint();
    o.kv_dim = model->config().kv_dim();
    o.block_tokens = kBlock;
    cache = std::make_unique<KvCache>(*store, o);
  }
  std::vector<int32_t> tokens(int n, int seed) const {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (i * 7 + seed * 13 + 1) % model->config().vocab_size;
    return t;
  }
  // Runs a job as the scheduler does, slice by slice up to each stop, through `pc`; returns the
  // final state (with all its rows).
  SequenceState run(PromptCache& pc, const PromptCacheRequest& r, PromptCacheProgress& p) {
    SequenceState st = model->new_sequence();
    if (auto resumed = pc.resume(r, p)) st = std::move(*resumed);
    int64_t computed = p.cached_tokens;
    const int64_t size = static_cast<int64_t>(r.tokens.size());
    while (computed < size) {
      const int64_t stop = pc.next_stop(r, computed);
      EXPECT_GT(stop, computed);
      EXPECT_TRUE(model->prefill(st, r.tokens.subspan(computed, stop - computed)).ok());
      computed = stop;
      SequenceState rows = st;  // the host rows [0, computed)
      auto snapshot = [&](SequenceState& out) {
        out = st;
        out.k.clear();
        out.v.clear();
        return Status::Ok();
      };
      pc.at_stop(r, p, stop, snapshot, rows);
      EXPECT_EQ(rows.k, st.k);  // lent, given back
    }
    pc.write_back(r, p, st);
    return st;
  }
};

PromptCacheRequest request(const std::vector<int32_t>& tokens, const std::vector<int64_t>& document_ends = {},
                           bool document = false) {
  PromptCacheRequest r;
  r.tokens = tokens;
  r.document_ends = document_ends;
  r.document = document;
  return r;
}

TEST(PromptCache, SlicesStopAtDocumentEndsAndTheLastWholeBlock) {
  Fixture f;
  const auto t = f.tokens(100, 1);
  const std::vector<int64_t> ends = {40, 70};
  PromptCache caching(*f.cache, *f.model, /*write_prompts=*/true);
  EXPECT_EQ(caching.next_stop(request(t, ends), 0), 40);
  EXPECT_EQ(caching.next_stop(request(t, ends), 40), 70);
  EXPECT_EQ(caching.next_stop(request(t, ends), 70), 96);  // the last whole block
  EXPECT_EQ(caching.next_stop(request(t, ends), 96), 100);
  PromptCache documents_only(*f.cache, *f.model, /*write_prompts=*/false);
  EXPECT_EQ(documents_only.next_stop(request(t, ends), 40), 70);
  EXPECT_EQ(documents_only.next_stop(request(t, ends), 70), 100);  // no prompt state to keep
  EXPECT_EQ(documents_only.next_stop(request(t), 0), 100);
  // A document stops at its last whole block only (its own end is stored whole).
  EXPECT_EQ(documents_only.next_stop(request(t, ends, true), 0), 96);
  EXPECT_EQ(documents_only.next_stop(request(t, ends, true), 96), 100);
  EXPECT_EQ(documents_only.next_stop(request(f.tokens(32, 1), {}, true), 0), 32);
}

TEST(PromptCache, APromptResumesFromTheLongestStoredDocumentEndExactly) {
  Fixture f;
  PromptCache pc(*f.cache, *f.model, /*write_prompts=*/false);
  const auto t = f.tokens(100, 2);
  const std::vector<int64_t> ends = {40, 70};
  PromptCacheProgress first;
  EXPECT_FALSE(pc.resume(request(t, ends), first).has_value());  // nothing stored yet
  const SequenceState full = f.run(pc, request(t, ends), first);
  EXPECT_EQ(first.stored_prefix, 70);
  PromptCacheProgress again;
  auto resumed = pc.resume(request(t, ends), again);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(again.cached_tokens, 70);
  EXPECT_EQ(again.hole, 0);
  // The state at 70 as computed in the job's slices (0-40, 40-70): bit for bit.
  SequenceState want = f.model->new_sequence();
  ASSERT_TRUE(f.model->prefill(want, std::span<const int32_t>(t).first(40)).ok());
  ASSERT_TRUE(f.model->prefill(want, std::span<const int32_t>(t).subspan(40, 30)).ok());
  const ModelConfig& c = f.model->config();
  EXPECT_EQ(serialize_state(*resumed, c, f.model->fingerprint()), serialize_state(want, c, f.model->fingerprint()));
  EXPECT_EQ(std::vector<float>(full.k.begin(), full.k.begin() + 70 * c.kv_dim()), resumed->k);
  // A document is always computed.
  PromptCacheProgress doc;
  EXPECT_FALSE(pc.resume(request(t, ends, true), doc).has_value());
}

TEST(PromptCache, PromptCachingResumesAtTheLastWholeBlockAndSkipsResidentRows) {
  Fixture f;
  PromptCache pc(*f.cache, *f.model, /*write_prompts=*/true);
  const auto t = f.tokens(100, 3);
  PromptCacheProgress first;
  f.run(pc, request(t), first);
  EXPECT_EQ(first.stored_prefix, 0);  // no document ends
  PromptCacheRequest r = request(t);
  r.resident_rows = 2 * kBlock;  // the decode worker holds the first two blocks
  PromptCacheProgress again;
  auto resumed = pc.resume(r, again);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(again.cached_tokens, 96);
  EXPECT_EQ(again.hole, 2 * kBlock);
  const size_t kv = f.model->config().kv_dim();
  EXPECT_EQ(std::vector<float>(resumed->k.begin(), resumed->k.begin() + 2 * kBlock * kv),
            std::vector<float>(2 * kBlock * kv, 0.0f));
  // Without prompt caching nothing of a plain prompt is looked up.
  PromptCache off(*f.cache, *f.model, /*write_prompts=*/false);
  PromptCacheProgress none;
  EXPECT_FALSE(off.resume(request(t), none).has_value());
}

TEST(PromptCache, ADocumentIsStoredWholeAndAPromptExtendingItResumesAtItsEnd) {
  Fixture f;
  PromptCache pc(*f.cache, *f.model, /*write_prompts=*/false);
  const auto doc = f.tokens(50, 4);
  PromptCacheRequest r = request(doc, {}, true);
  r.document_ttl = std::chrono::seconds(60);
  PromptCacheProgress p;
  const SequenceState st = f.run(pc, r, p);
  auto rec = pc.store_document(r, st);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->tokens, doc);
  auto prompt = doc;
  const auto question = f.tokens(10, 5);
  prompt.insert(prompt.end(), question.begin(), question.end());
  PromptCacheProgress q;
  auto resumed = pc.resume(request(prompt, {50}), q);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(q.cached_tokens, 50);
  // The store refusing a document is UNAVAILABLE, naming the store.
  auto tiny = make_kv_store("memory:1KiB");
  ASSERT_TRUE(tiny.ok());
  KvCache small(**tiny, f.cache->options());
  PromptCache full(small, *f.model, false);
  auto refused = full.store_document(r, st);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("KV store"), std::string::npos);
}

}  // namespace
}  // namespace yoco
