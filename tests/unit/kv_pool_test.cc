// The paged pool: allocation accounting, all-or-nothing reservation, and sequences whose K/V
// rows live in scattered pool blocks decoding bitwise like contiguous ones.
#include "model/kv_pool.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

// Prefix-chain keys with chosen values (the pool compares all 128 bits).
std::vector<BlockKey> keys(std::initializer_list<uint64_t> a) {
  std::vector<BlockKey> out;
  for (uint64_t x : a) out.push_back(BlockKey{x, ~x});
  return out;
}

TEST(KvPool, ReserveAndReleaseAccounting) {
  auto pool = KvPool::create(10, 32, 8);
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE(KvPool::create(10, 24, 8).ok());  // not a multiple of the chunk
  KvPages a = (*pool)->new_pages(), b = (*pool)->new_pages();
  ASSERT_TRUE((*pool)->reserve(a, 65).ok());  // 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ((*pool)->free_blocks(), 7);
  ASSERT_TRUE((*pool)->reserve(a, 96).ok());  // still 3
  EXPECT_EQ((*pool)->free_blocks(), 7);
  Status st = (*pool)->reserve(b, 32 * 8);  // 8 > 7 free: nothing taken
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ((*pool)->free_blocks(), 7);
  (*pool)->release(a);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ((*pool)->free_blocks(), 10);
}

TEST(KvPool, PrefixSharingNeedsEqualHashesAndEqualBytesAndRefcountsBlocks) {
  auto pool = KvPool::create(10, 32, 4);
  ASSERT_TRUE(pool.ok());
  KvPool& p = **pool;
  auto fill = [&](KvPages& pages, int block, float value) {
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 4; ++c) {
        p.k_data()[pages.offset(block * 32 + r) + c] = value + r;
        p.v_data()[pages.offset(block * 32 + r) + c] = -value - c;
      }
  };
  KvPages a = p.new_pages(), b = p.new_pages(), c = p.new_pages();
  ASSERT_TRUE(p.reserve(a, 70).ok());  // 3 blocks
  ASSERT_TRUE(p.reserve(b, 70).ok());
  ASSERT_TRUE(p.reserve(c, 40).ok());  // 2 blocks
  EXPECT_EQ(p.free_blocks(), 2);
  fill(a, 0, 1), fill(a, 1, 2), fill(b, 0, 1), fill(b, 1, 2), fill(c, 0, 1), fill(c, 1, 9);
  EXPECT_EQ(p.share_prefix(a, keys({11, 22})), 0);  // a's blocks become the shared ones
  const auto a_blocks = a.blocks;
  EXPECT_EQ(p.share_prefix(b, keys({11, 22})), 2);  // b now holds a's first two
  EXPECT_EQ(b.blocks[0], a_blocks[0]);
  EXPECT_EQ(b.blocks[1], a_blocks[1]);
  EXPECT_EQ(p.free_blocks(), 4);
  EXPECT_EQ(p.shared_blocks(), 2);
  // Same hash, different bytes (a collision or a different computation): not shared.
  EXPECT_EQ(p.share_prefix(c, keys({11, 22})), 1);
  EXPECT_NE(c.blocks[1], a_blocks[1]);
  EXPECT_EQ(p.free_blocks(), 5);
  // Blocks go back only when their last holder lets go.
  p.release(a);
  EXPECT_EQ(p.free_blocks(), 6);  // a's third block; the shared two are still held
  p.release(b);
  EXPECT_EQ(p.free_blocks(), 8);
  p.release(c);
  EXPECT_EQ(p.free_blocks(), 10);
  EXPECT_EQ(p.shared_blocks(), 0);
  // A freed block leaves the index: new content under an old hash is not matched to it.
  KvPages d = p.new_pages(), e = p.new_pages();
  ASSERT_TRUE(p.reserve(d, 32).ok());
  ASSERT_TRUE(p.reserve(e, 32).ok());
  fill(d, 0, 1), fill(e, 0, 1);
  EXPECT_EQ(p.share_prefix(d, keys({11})), 0);
  EXPECT_EQ(p.share_prefix(e, keys({11})), 1);
  p.release(d);
  p.release(e);
  EXPECT_EQ(p.free_blocks(), 10);
}

// Resident prefixes (docs/design.md): released indexed blocks are kept (counted free), claimed
// by hash with a pin, evicted least recently released first, and never while pinned.
TEST(KvPool, KeptBlocksAreClaimedPinnedAndEvictedOldestFirst) {
  auto pool = KvPool::create(6, 32, 4);
  ASSERT_TRUE(pool.ok());
  KvPool& p = **pool;
  p.set_keep_released(true);
  KvPages a = p.new_pages(), b = p.new_pages();
  ASSERT_TRUE(p.reserve(a, 64).ok());
  ASSERT_TRUE(p.reserve(b, 64).ok());
  for (int r = 0; r < 64; ++r) p.k_data()[a.offset(r)] = 7.0f + r;
  EXPECT_EQ(p.share_prefix(a, keys({11, 22})), 0);
  EXPECT_EQ(p.share_prefix(b, keys({33, 44})), 0);
  const auto a_blocks = a.blocks, b_blocks = b.blocks;
  p.release(b);  // released first: evicted first
  p.release(a);
  EXPECT_EQ(p.free_blocks(), 6);
  EXPECT_EQ(p.kept_blocks(), 4);
  // A claim stops at the first hash not held, and pins what it returns.
  auto got = p.claim_prefix(keys({11, 22, 99}), 3);
  EXPECT_EQ(got, a_blocks);
  EXPECT_EQ(p.kept_blocks(), 2);
  EXPECT_EQ(p.k_data()[static_cast<size_t>(a_blocks[1]) * 32 * 4], 7.0f + 32);
  EXPECT_TRUE(p.claim_prefix(keys({22}), 1).size() == 1);  // the index by hash alone
  p.release_blocks(std::vector<int32_t>{a_blocks[1]});
  // Pressure: 2 truly free, then b's kept blocks, last released last (b's second block, 44,
  // goes first: a prefix's tail before its head); the pinned ones are never taken.
  KvPages c = p.new_pages();
  ASSERT_TRUE(p.reserve(c, 3 * 32).ok());
  EXPECT_EQ(p.claim_prefix(keys({44}), 1).size(), 0u);  // evicted: unindexed
  EXPECT_EQ(p.reserve(c, 6 * 32).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(p.free_blocks(), 1);
  p.release_blocks(got);
  p.release(c);
  EXPECT_EQ(p.free_blocks(), 6);
  // Keys are compared in full: one whose 64-bit fold equals a held key's is not that key.
  const BlockKey held = keys({11})[0], same_fold{held.a ^ 1, held.b ^ 1};
  ASSERT_EQ(same_fold.fold64(), held.fold64());
  EXPECT_EQ(p.claim_prefix(std::vector<BlockKey>{same_fold}, 1).size(), 0u);
  // Turning keeping off frees what was kept and unindexes it.
  p.set_keep_released(false);
  EXPECT_EQ(p.kept_blocks(), 0);
  EXPECT_EQ(p.claim_prefix(keys({11, 22}), 2).size(), 0u);
}

// Decode residency (docs/design.md §6): the summary GetLoad reports lists the index's keys (held
// or kept), newest use first and a chain's first blocks first, cut at the bound; kept blocks stay
// in it until evicted.
TEST(KvPool, ResidencySummaryListsHeldAndKeptPrefixesNewestFirst) {
  auto pool = KvPool::create(6, 32, 4);
  ASSERT_TRUE(pool.ok());
  KvPool& p = **pool;
  p.set_keep_released(true);
  auto fill = [&](KvPages& pages, int block, float value) {
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 4; ++c) {
        p.k_data()[pages.offset(block * 32 + r) + c] = value + r;
        p.v_data()[pages.offset(block * 32 + r) + c] = -value - c;
      }
  };
  auto folds = [](const std::vector<BlockKey>& ks) {
    std::vector<uint64_t> out;
    for (const BlockKey& k : ks) out.push_back(k.fold64());
    return out;
  };
  KvPages a = p.new_pages();
  ASSERT_TRUE(p.reserve(a, 96).ok());
  fill(a, 0, 1), fill(a, 1, 2), fill(a, 2, 3);
  EXPECT_EQ(p.share_prefix(a, keys({11, 12, 13})), 0);
  p.release(a);
  EXPECT_EQ(p.kept_blocks(), 3);
  EXPECT_EQ(p.resident_keys(10), folds(keys({11, 12, 13})));
  EXPECT_EQ(p.resident_keys(2), folds(keys({11, 12})));  // cut short: the chain's first blocks
  EXPECT_TRUE(p.resident_keys(0).empty());
  // A later sequence sharing the first two blocks: its use is the newest.
  KvPages b = p.new_pages();
  ASSERT_TRUE(p.reserve(b, 96).ok());  // the three never-used blocks
  fill(b, 0, 1), fill(b, 1, 2), fill(b, 2, 7);
  EXPECT_EQ(p.share_prefix(b, keys({11, 12, 17})), 2);
  EXPECT_EQ(p.resident_keys(1), folds(keys({11})));
  EXPECT_EQ(p.resident_keys(10).size(), 4u);  // 11, 12, 17 and a's kept 13
  // Pressure evicts the kept block: it leaves the summary.
  KvPages c = p.new_pages();
  ASSERT_TRUE(p.reserve(c, 3 * 32).ok());
  EXPECT_EQ(p.kept_blocks(), 0);
  EXPECT_EQ(p.resident_keys(10).size(), 3u);
  p.release(c);
  p.release(b);
  // Keeping off: nothing is resident any more.
  p.set_keep_released(false);
  EXPECT_TRUE(p.resident_keys(10).empty());
}

class PagedDecodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedDecodeTest, PagedSequencesDecodeBitwiseLikeContiguousOnes) {
  test::TempDir dir;
  auto cfg = find_preset(GetParam());
  ASSERT_TRUE(write_random_model(dir.path(), cfg.value(), 9, DType::kF32).ok());
  auto m = Model::load(dir.path());
  ASSERT_TRUE(m.ok());
  const Model& model = **m;
  const int V = model.config().vocab_size;
  auto pool = KvPool::create(64, 32, model.config().kv_dim());
  ASSERT_TRUE(pool.ok());
  // Fragment the pool so block tables are not in order.
  KvPages filler = (*pool)->new_pages();
  ASSERT_TRUE((*pool)->reserve(filler, 32 * 5).ok());

  const std::vector<int> lens = {70, 5, 33};
  std::vector<SequenceState> flat, paged;
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<int32_t> toks;
    for (int t = 0; t < lens[i]; ++t) toks.push_back((t * 13 + static_cast<int>(i) * 7) % V);
    flat.push_back(model.new_sequence());
    paged.push_back(model.new_sequence());
    paged.back().pages = (*pool)->new_pages();
    ASSERT_TRUE((*pool)->reserve(*paged.back().pages, lens[i] + 20).ok());
    if (i == 0) (*pool)->release(filler);  // later sequences get the freed blocks, out of order
    ASSERT_TRUE(model.prefill(flat.back(), toks).ok());
    ASSERT_TRUE(model.prefill(paged.back(), toks).ok());
  }
  std::vector<SequenceState*> pf, pp;
  for (size_t i = 0; i < lens.size(); ++i) {
    pf.push_back(&flat[i]);
    pp.push_back(&paged[i]);
  }
  std::vector<float> lf(lens.size() * V), lp(lf.size());
  ASSERT_TRUE(model.logits(pf, lf.data()).ok());
  ASSERT_TRUE(model.logits(pp, lp.data()).ok());
  for (int step = 0; step < 20; ++step) {
    ASSERT_EQ(0, std::memcmp(lf.data(), lp.data(), lf.size() * 4)) << "step " << step;
    std::vector<int32_t> next(lens.size());
    for (size_t i = 0; i < lens.size(); ++i)
      next[i] =
          static_cast<int32_t>(std::max_element(lf.begin() + i * V, lf.begin() + (i + 1) * V) - (lf.begin() + i * V));
    ASSERT_TRUE(model.decode_step(pf, next, lf.data()).ok());
    ASSERT_TRUE(model.decode_step(pp, next, lp.data()).ok());
  }
  // The serialized hand-off is the same bytes whichever storage the rows came from.
  EXPECT_EQ(serialize_state(flat[0], model.config(), model.fingerprint()),
            serialize_state(paged[0], model.config(), model.fingerprint()));
  // Out of reserved rows: the step is refused before anything changes.
  const int64_t pos = paged[1].position;
  for (int64_t r = pos; r < paged[1].pages->capacity(); ++r) {
    SequenceState* one[1] = {&paged[1]};
    const int32_t t[1] = {1};
    ASSERT_TRUE(model.decode_step(one, t, lp.data()).ok());
  }
  SequenceState* one[1] = {&paged[1]};
  const int32_t t[1] = {1};
  EXPECT_EQ(model.decode_step(one, t, lp.data()).code(), StatusCode::kResourceExhausted);
  for (auto& s : paged) (*pool)->release(*s.pages);
  EXPECT_EQ((*pool)->free_blocks(), 64);
}

INSTANTIATE_TEST_SUITE_P(Presets, PagedDecodeTest, ::testing::Values("tiny-gret", "tiny-swa"), [](const auto& info) {
  return info.param == "tiny-gret" ? std::string("gret") : std::string("swa");
});

}  // namespace
}  // namespace yoco
