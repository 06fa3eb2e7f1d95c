// The paged pool: allocation accounting, all-or-nothing reservation, and sequences whose K/V
// rows live in scattered pool blocks decoding bitwise like contiguous ones.
#include <gtest/gtest.h>

#include <cstring>

#include "model/kv_pool.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

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
      next[i] = static_cast<int32_t>(std::max_element(lf.begin() + i * V, lf.begin() + (i + 1) * V) - (lf.begin() + i * V));
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

INSTANTIATE_TEST_SUITE_P(Presets, PagedDecodeTest, ::testing::Values("tiny-gret", "tiny-swa"),
                         [](const auto& info) { return info.param == "tiny-gret" ? std::string("gret") : std::string("swa"); });

}  // namespace
}  // namespace yoco
