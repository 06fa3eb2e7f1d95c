// kv_store/tiered_store.h: read-through fills the upper tiers; a failing lower tier fails nothing.
#include "kv_store/tiered_store.h"

#include <gtest/gtest.h>

#include "kv_store/memory_store.h"
#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreTiered, ReadThroughFillsUpperTiers) {
  test::TempDir tmp;
  {
    std::vector<std::unique_ptr<KvStore>> tiers;
    tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
    tiers.push_back(open_dir(tmp.sub("store")));
    TieredStore t(std::move(tiers));
    ASSERT_TRUE(t.put("k", "value", 0s).ok());
    EXPECT_TRUE(t.tier(0).get("k")->has_value());
    EXPECT_TRUE(t.tier(1).get("k")->has_value());
  }
  // A fresh process: memory is empty, the dir still has it; a get fills memory.
  std::vector<std::unique_ptr<KvStore>> tiers;
  tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
  tiers.push_back(open_dir(tmp.sub("store")));
  TieredStore t(std::move(tiers));
  EXPECT_FALSE(t.tier(0).get("k")->has_value());
  auto r = t.get("k");
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, "value");
  EXPECT_TRUE(t.tier(0).get("k")->has_value());
  std::vector<std::string> keys{"k", "nope"};
  auto many = t.get_many(keys);
  ASSERT_EQ(many.size(), 2u);
  EXPECT_TRUE(many[0].ok() && many[0]->has_value());
  EXPECT_TRUE(many[1].ok() && !many[1]->has_value());
  EXPECT_EQ(t.tier_stats().size(), 2u);
  EXPECT_EQ(t.name(), "tiered(memory,dir:" + tmp.sub("store") + ")");
}

TEST(KvStoreTiered, FailingLowerTierDoesNotFailRequests) {
  std::vector<std::unique_ptr<KvStore>> tiers;
  tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  tiers.push_back(std::move(fake));
  TieredStore t(std::move(tiers));
  f->fail = true;
  EXPECT_TRUE(t.put("k", "v", 0s).ok());
  EXPECT_TRUE(t.get("k")->has_value());
  auto miss = t.get("other");
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  EXPECT_GE(t.stats().errors, 1u);
  // Every tier down: the failure shows.
  std::vector<std::unique_ptr<KvStore>> only;
  auto f2 = std::make_unique<FakeStore>();
  f2->fail = true;
  only.push_back(std::move(f2));
  TieredStore t2(std::move(only));
  EXPECT_FALSE(t2.put("k", "v", 0s).ok());
  EXPECT_FALSE(t2.get("k").ok());
}

}  // namespace
}  // namespace yoco
