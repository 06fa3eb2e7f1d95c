// kv_store/memory_store.h: LRU under a byte budget, TTLs, sets, threads.
#include "kv_store/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/unit/kv_store/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreMemory, LruEvictionUnderByteBudget) {
  const std::string v(1000, 'x');
  const int64_t per = 1 + 1000 + 64;  // key + value + fixed overhead (memory_store.h)
  MemoryStore m(3 * per + 10);
  ASSERT_TRUE(m.put("a", v, 0s).ok());
  ASSERT_TRUE(m.put("b", v, 0s).ok());
  ASSERT_TRUE(m.put("c", v, 0s).ok());
  ASSERT_TRUE(m.get("a")->has_value());  // a is now the most recent
  ASSERT_TRUE(m.put("d", v, 0s).ok());   // evicts b, the least recent
  EXPECT_TRUE(m.get("a")->has_value());
  EXPECT_FALSE(m.get("b")->has_value());
  EXPECT_TRUE(m.get("c")->has_value());
  EXPECT_TRUE(m.get("d")->has_value());
  EXPECT_LE(m.bytes_used(), m.max_bytes());
  EXPECT_EQ(m.put("big", std::string(5000, 'y'), 0s).code(), StatusCode::kResourceExhausted);
  // Overwrite replaces, binary-safe.
  const std::string bin("\0\x01\xff\0z", 5);
  ASSERT_TRUE(m.put("a", bin, 0s).ok());
  EXPECT_EQ(value_of(m.get("a")), bin);
  ASSERT_TRUE(m.del("a").ok());
  EXPECT_FALSE(m.get("a")->has_value());
  auto s = m.stats();
  EXPECT_GE(s.hits, 5u);
  EXPECT_GE(s.misses, 2u);
}

TEST(KvStoreMemory, TtlExpiryAndSets) {
  MemoryStore m(1 << 20);
  ASSERT_TRUE(m.put("short", "v", 1s).ok());
  ASSERT_TRUE(m.put("long", "v", 0s).ok());
  EXPECT_TRUE(m.get("short")->has_value());
  std::this_thread::sleep_for(1100ms);
  EXPECT_FALSE(m.get("short")->has_value());
  EXPECT_TRUE(m.get("long")->has_value());
  ASSERT_TRUE(m.set_add("s", "x").ok());
  ASSERT_TRUE(m.set_add("s", "y").ok());
  ASSERT_TRUE(m.set_add("s", "x").ok());
  EXPECT_EQ(ok_value(m.set_members("s")), (std::vector<std::string>{"x", "y"}));
  ASSERT_TRUE(m.set_remove("s", "x").ok());
  EXPECT_EQ(ok_value(m.set_members("s")), (std::vector<std::string>{"y"}));
  EXPECT_TRUE(m.set_members("none")->empty());
}

TEST(KvStoreMemory, ThreadSafe) {
  MemoryStore m(64 << 10);
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string key = key_name({(i * 7 + t) % 50});
        if (i % 3 == 0) (void)m.put(key, std::string(500, static_cast<char>('a' + t)), 0s);
        auto r = m.get(key);
        if (!r.ok()) ++bad;
        else if (r->has_value() && (*r)->size() != 500) ++bad;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(m.bytes_used(), 64 << 10);
}

}  // namespace
}  // namespace yoco
