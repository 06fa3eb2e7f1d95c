// kv_store/cache.h (KvCache) through the prefill worker's prompt cache (prefill_service/prompt_cache.h):
// blocks by prefix chain, state snapshots, documents, damaged or missing objects, a store that is down.
#include "kv_store/cache.h"

#include <gtest/gtest.h>

#include "common/document_id.h"
#include "kv_store/memory_store.h"
#include "model/safetensors.h"
#include "prefill_service/prompt_cache.h"
#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreCache, WriteBlocksLongestPrefixAndReadBack) {
  const ModelConfig c = tiny_config(0);
  const int B = 4, D = c.kv_dim();
  MemoryStore store(64 << 20);
  KvCache cache(store, cache_options(c, B));
  auto tokens = iota_tokens(42);  // 10 full blocks
  auto k = random_floats(42 * D, 1), v = random_floats(42 * D, 2);
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 0);
  ASSERT_TRUE(cache.write_blocks(tokens, k.data(), v.data(), 0, 7, 0s).ok());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 7);
  EXPECT_EQ(cache.longest_cached_prefix(tokens, 5), 5);
  ASSERT_TRUE(cache.write_blocks(tokens, k.data(), v.data(), 7, 3, 0s).ok());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 10);
  EXPECT_FALSE(cache.write_blocks(tokens, k.data(), v.data(), 9, 2, 0s).ok());  // past the tokens
  // Another prompt sharing the first 3 blocks.
  auto other = tokens;
  other[13] = 999;
  EXPECT_EQ(cache.longest_cached_prefix(other), 3);
  auto keys = chain_keys(tokens, B, kFp);
  auto rows = cache.read_blocks(keys);
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  EXPECT_EQ(rows->k, std::vector<float>(k.begin(), k.begin() + 40 * D));
  EXPECT_EQ(rows->v, std::vector<float>(v.begin(), v.begin() + 40 * D));
  EXPECT_EQ(cache.read_blocks(chain_keys(other, B, kFp)).status().code(), StatusCode::kNotFound);
  // A damaged block stops the walk there, is deleted, counted, and never returned.
  const std::string victim = block_store_key(keys[4]);
  std::string bytes = value_of(store.get(victim));
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(store.put(victim, bytes, 0s).ok());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 4);
  EXPECT_EQ(cache.stats().corrupt, 1u);
  EXPECT_FALSE(store.get(victim)->has_value());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 4);
  // A block of another model under our key (a collision, or a bug): also refused.
  std::string foreign = encode_kv_block(k.data(), v.data(), B, D, KvDType::kF32, kFp + 1, 0);
  ASSERT_TRUE(store.put(victim, foreign, 0s).ok());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 4);
  EXPECT_EQ(cache.stats().corrupt, 2u);
  // A block of the wrong shape under our key.
  std::string wrong = encode_kv_block(k.data(), v.data(), B - 1, D, KvDType::kF32, kFp, 0);
  ASSERT_TRUE(store.put(victim, wrong, 0s).ok());
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 4);
  EXPECT_EQ(cache.stats().corrupt, 3u);
}

TEST(KvStoreCache, Bf16Blocks) {
  const ModelConfig c = tiny_config(0);
  const int B = 4, D = c.kv_dim();
  MemoryStore store(64 << 20);
  KvCache cache(store, cache_options(c, B, KvDType::kBF16));
  auto tokens = iota_tokens(8);
  auto k = random_floats(8 * D, 1), v = random_floats(8 * D, 2);
  ASSERT_TRUE(cache.write_blocks(tokens, k.data(), v.data(), 0, 2, 0s).ok());
  auto rows = cache.read_blocks(chain_keys(tokens, B, kFp));
  ASSERT_TRUE(rows.ok());
  for (size_t i = 0; i < k.size(); ++i) EXPECT_EQ(rows->k[i], bf16_to_f32(f32_to_bf16(k[i])));
}

TEST(KvStoreCache, StateSnapshotsMakeAPrefixResumable) {
  const ModelConfig c = tiny_config(0);
  const int B = 4;
  MemoryStore store(64 << 20);
  KvCache cache(store, cache_options(c, B));
  auto tokens = iota_tokens(30);  // 7 full blocks
  SequenceState full = random_state(c, 30, 3);
  ASSERT_TRUE(write_state_blocks(cache, tokens, full, 0, 7, 0s).ok());
  // No snapshot anywhere: nothing resumable.
  EXPECT_EQ(cache.load_prefix(tokens).tokens, 0);
  // A snapshot at the end of block 5 (position 20): a prefix of 5 blocks.
  SequenceState at20 = random_state(c, 20, 3);  // same rows: same seed, same prefix
  StateBlobOptions so;
  so.include_kv = false;
  auto keys = chain_keys(tokens, B, kFp);
  ASSERT_TRUE(cache.put_state(keys[4], serialize_state(at20, c, kFp, so), 0s).ok());
  CachedPrefix p = cache.load_prefix(tokens);
  EXPECT_EQ(p.tokens, 20);
  EXPECT_EQ(p.blocks, 5);
  SequenceState restored;
  ASSERT_TRUE(restore_prefix(cache, p, c, restored).ok());
  EXPECT_EQ(serialize_state(restored, c, kFp), serialize_state(at20, c, kFp));
  EXPECT_EQ(cache.load_prefix(tokens, 4).tokens, 0);  // limited below the snapshot
  // get_state round trip; a missing one is nullopt.
  auto s = cache.get_state(keys[4]);
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_FALSE(cache.get_state(keys[3])->has_value());
}

// Blocks resident on the decode worker (docs/design.md, resident prefixes) are skipped: not read,
// not even needed in the store; their rows come back as zeros and the rest as stored.
TEST(KvStoreCache, LoadPrefixSkipsResidentBlocks) {
  const ModelConfig c = tiny_config(0);
  const int B = 4, D = c.kv_dim();
  MemoryStore store(64 << 20);
  KvCache cache(store, cache_options(c, B));
  auto tokens = iota_tokens(30);
  SequenceState full = random_state(c, 30, 3);
  ASSERT_TRUE(write_state_blocks(cache, tokens, full, 0, 7, 0s).ok());
  StateBlobOptions so;
  so.include_kv = false;
  auto keys = chain_keys(tokens, B, kFp);
  ASSERT_TRUE(cache.put_state(keys[4], serialize_state(random_state(c, 20, 3), c, kFp, so), 0s).ok());
  ASSERT_TRUE(store.del(block_store_key(keys[0])).ok());
  ASSERT_TRUE(store.del(block_store_key(keys[1])).ok());
  EXPECT_EQ(cache.load_prefix(tokens).tokens, 0);  // block 0 is gone
  const auto hits = cache.stats().hits;
  CachedPrefix p = cache.load_prefix(tokens, -1, 2);
  EXPECT_EQ(p.tokens, 20);
  EXPECT_EQ(p.blocks, 5);
  EXPECT_EQ(cache.stats().hits - hits, 6u);  // blocks 2 .. 6 and the state, never 0 or 1
  ASSERT_EQ(p.k.size(), static_cast<size_t>(20 * D));
  EXPECT_EQ(std::vector<float>(p.k.begin(), p.k.begin() + 8 * D), std::vector<float>(8 * D, 0.0f));
  EXPECT_EQ(std::vector<float>(p.k.begin() + 8 * D, p.k.end()),
            std::vector<float>(full.k.begin() + 8 * D, full.k.begin() + 20 * D));
  EXPECT_EQ(cache.load_prefix(tokens, -1, 99).tokens, 20);  // more than the prompt's blocks: clamped
}

TEST(KvStoreCache, DocumentsSaveLoadListDelete) {
  for (int window : {0, 3}) {
    SCOPED_TRACE(window ? "sliding window" : "gated retention");
    const ModelConfig c = tiny_config(window);
    const int B = 4;
    test::TempDir tmp;
    auto dir = open_dir(tmp.sub("store"));
    KvCache cache(*dir, cache_options(c, B));
    for (int n : {13, 16}) {  // a trailing partial block, and none
      auto tokens = iota_tokens(n, 5 + n);
      SequenceState st = random_state(c, n, 10 + n);
      auto rec = save_document(cache, tokens, st, c, 3600s);
      ASSERT_TRUE(rec.ok()) << rec.status().to_string();
      EXPECT_EQ(rec->id, document_id(tokens, kFp));
      EXPECT_EQ(rec->block_keys.size(), static_cast<size_t>(n / B));
      EXPECT_GT(rec->stored_bytes, 0);
      auto doc = cache.load_document(rec->id);
      ASSERT_TRUE(doc.ok() && doc->has_value()) << doc.status().to_string();
      ASSERT_TRUE((*doc)->cached.has_value());
      EXPECT_EQ((*doc)->record.tokens, tokens);
      SequenceState back;
      ASSERT_TRUE(restore_prefix(cache, *(*doc)->cached, c, back).ok());
      EXPECT_EQ(serialize_state(back, c, kFp), serialize_state(st, c, kFp)) << n << " tokens";
    }
    auto ids = cache.list_documents();
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(ids->size(), 2u);
    const std::string id13 = document_id(iota_tokens(13, 18), kFp);
    ASSERT_TRUE(cache.delete_document(id13).ok());
    EXPECT_FALSE(cache.get_document(id13)->has_value());
    EXPECT_FALSE(cache.load_document(id13)->has_value());
    EXPECT_EQ(cache.list_documents()->size(), 1u);
    // A record deleted behind the index's back is pruned from the listing.
    const std::string id16 = document_id(iota_tokens(16, 21), kFp);
    ASSERT_TRUE(dir->del(id16).ok());
    EXPECT_TRUE(cache.list_documents()->empty());
    EXPECT_EQ(cache.get_document("doc-nothex").status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(cache.get_document("doc-" + std::string(32, '0'))->has_value());
  }
}

// Only the form document_id() mints is an id: anything else is the caller's INVALID_ARGUMENT
// naming `id`, and the store (a dir store's files) is never touched with it.
TEST(KvStoreCache, NonIdsAreInvalidArgumentAndNeverReachTheStore) {
  const ModelConfig c = tiny_config(0);
  test::TempDir tmp;
  auto dir = open_dir(tmp.sub("store"));
  KvCache cache(*dir, cache_options(c, 4));
  const std::vector<std::string> bad = {"../../etc/passwd",
                                        "*",
                                        std::string(1 << 20, 'a'),
                                        "",
                                        "doc-" + std::string(31, '0') + "\n",
                                        "doc-" + std::string(32, 'A'),
                                        "doc-" + std::string(33, '0'),
                                        std::string("doc-") + std::string(31, '0') + '\0'};
  for (const std::string& id : bad) {
    SCOPED_TRACE(id.substr(0, 40));
    for (const Status& st :
         {cache.get_document(id).status(), cache.load_document(id).status(), cache.delete_document(id)}) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
      EXPECT_EQ(st.message().rfind("id: ", 0), 0u) << st.message();
      EXPECT_LT(st.message().size(), 200u);
      EXPECT_EQ(st.message().find('\n'), std::string::npos);
    }
  }
  EXPECT_TRUE(is_document_id(document_id(iota_tokens(5, 1), kFp)));
  EXPECT_FALSE(cache.get_document("doc-" + std::string(32, 'f'))->has_value());
  EXPECT_TRUE(cache.delete_document("doc-" + std::string(32, 'f')).ok());
}

TEST(KvStoreCache, DocumentWithAMissingBlockNeedsRecompute) {
  const ModelConfig c = tiny_config(0);
  MemoryStore store(64 << 20);
  KvCache cache(store, cache_options(c, 4));
  auto tokens = iota_tokens(12);
  auto rec = save_document(cache, tokens, random_state(c, 12, 1), c, 0s);
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE(store.del(block_store_key(rec->block_keys[1])).ok());
  auto doc = cache.load_document(rec->id);
  ASSERT_TRUE(doc.ok() && doc->has_value());
  EXPECT_FALSE((*doc)->cached.has_value());
  EXPECT_EQ((*doc)->record.tokens, tokens);  // enough to recompute
  // A damaged record is deleted and reads as absent.
  std::string bytes = value_of(store.get(rec->id));
  bytes[kObjectHeaderBytes + 3] ^= 1;
  ASSERT_TRUE(store.put(rec->id, bytes, 0s).ok());
  EXPECT_FALSE(cache.get_document(rec->id)->has_value());
  EXPECT_FALSE(store.get(rec->id)->has_value());
}

TEST(KvStoreCache, StoreDownMeansNotCached) {
  const ModelConfig c = tiny_config(0);
  FakeStore store;
  KvCache cache(store, cache_options(c, 4));
  auto tokens = iota_tokens(12);
  auto k = random_floats(12 * c.kv_dim(), 1);
  ASSERT_TRUE(cache.write_blocks(tokens, k.data(), k.data(), 0, 3, 0s).ok());
  store.fail = true;
  EXPECT_EQ(cache.longest_cached_prefix(tokens), 0);
  EXPECT_EQ(cache.load_prefix(tokens).tokens, 0);
  EXPECT_FALSE(cache.write_blocks(tokens, k.data(), k.data(), 0, 3, 0s).ok());
  EXPECT_GE(cache.stats().errors, 2u);
}

}  // namespace
}  // namespace yoco
