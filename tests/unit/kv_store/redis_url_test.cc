// kv_store/redis_url.cc (parse_redis_url, redis_store.h): one server's and a cluster's URLs.
#include <gtest/gtest.h>

#include "kv_store/factory.h"
#include "kv_store/redis_store.h"
#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreFactory, RedisUrl) {
  auto o = parse_redis_url(
      "redis://alice:p%40ss@cache.local:6380/"
      "3?timeout_ms=150&connect_timeout_ms=99&pool=8&chunk_bytes=256KiB&prefix=t:&breaker_failures=5&breaker_cooldown_"
      "ms=700");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->user, "alice");
  EXPECT_EQ(o->password, "p@ss");
  EXPECT_EQ(o->host, "cache.local");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 3);
  EXPECT_EQ(o->command_timeout, 150ms);
  EXPECT_EQ(o->connect_timeout, 99ms);
  EXPECT_EQ(o->pool_size, 8);
  EXPECT_EQ(o->chunk_bytes, 256 << 10);
  EXPECT_EQ(o->key_prefix, "t:");
  EXPECT_EQ(o->breaker_options.failure_threshold, 5);
  EXPECT_EQ(o->breaker_options.cooldown, 700ms);
  EXPECT_FALSE(o->tls);
  auto p = parse_redis_url("redis://:secret@[::1]:7000");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->user, "");
  EXPECT_EQ(p->password, "secret");
  EXPECT_EQ(p->host, "::1");
  EXPECT_EQ(p->port, 7000);
  auto q = parse_redis_url("redis://localhost");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->port, 6379);
  EXPECT_EQ(q->db, 0);
  EXPECT_TRUE(parse_redis_url("rediss://h")->tls);
  auto t = parse_redis_url(
      "redis://h?tls=1&tls_ca=/etc/ca.pem&tls_cert=/c.pem&tls_key=/"
      "k%20ey.pem&tls_server_name=redis.internal&tls_verify=0");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->tls);
  EXPECT_EQ(t->tls_options.ca_file, "/etc/ca.pem");
  EXPECT_EQ(t->tls_options.cert_file, "/c.pem");
  EXPECT_EQ(t->tls_options.key_file, "/k ey.pem");
  EXPECT_EQ(t->tls_options.server_name, "redis.internal");
  EXPECT_FALSE(t->tls_options.verify);
  EXPECT_TRUE(parse_redis_url("rediss://h")->tls_options.verify);
  EXPECT_FALSE(parse_redis_url("rediss://h?tls_verify=maybe").ok());
  EXPECT_FALSE(parse_redis_url("http://h").ok());
  EXPECT_FALSE(parse_redis_url("redis://h:port").ok());
  EXPECT_FALSE(parse_redis_url("redis://h/x").ok());
  EXPECT_FALSE(parse_redis_url("redis://h?chunk_bytes=1").ok());
  EXPECT_FALSE(parse_redis_url("redis://u:%zz@h").ok());
}

TEST(KvStoreFactory, RedisClusterUrl) {
  auto c = parse_redis_url("rediss-cluster://:pw@10.0.0.1:7000,[::1]:7001,cache-2?timeout_ms=50&tls_ca=/ca.pem");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->cluster);
  EXPECT_TRUE(c->tls);
  EXPECT_EQ(c->password, "pw");
  EXPECT_EQ(c->seeds, (std::vector<std::pair<std::string, int>>{{"10.0.0.1", 7000}, {"::1", 7001}, {"cache-2", 6379}}));
  EXPECT_EQ(c->command_timeout, 50ms);
  EXPECT_EQ(c->tls_options.ca_file, "/ca.pem");
  EXPECT_FALSE(parse_redis_url("redis-cluster://a:1,,b:2").ok());
  EXPECT_FALSE(parse_redis_url("redis-cluster://a:1,b:x").ok());
  // A cluster has only database 0, and the prefix must not hold a hash tag of its own.
  EXPECT_EQ(make_kv_store("redis-cluster://a:1/2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_kv_store("redis-cluster://a:1?prefix=x{y}").status().code(), StatusCode::kInvalidArgument);
  // Its seeds' commas do not split tiers; a part that starts a tier does.
  test::TempDir dir;
  auto stack =
      make_kv_store("memory:1MiB, redis-cluster://127.0.0.1:7000,127.0.0.1:7001?timeout_ms=50, dir:" + dir.sub("x"));
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  const auto tiers = (*stack)->tier_stats();
  ASSERT_EQ(tiers.size(), 3u);
  EXPECT_EQ(tiers[1].name, "redis-cluster://127.0.0.1:7000,127.0.0.1:7001");
  auto lone = make_kv_store("redis-cluster://127.0.0.1:7000");
  ASSERT_TRUE(lone.ok());
  EXPECT_EQ((*lone)->name(), "redis-cluster://127.0.0.1:7000");
}

}  // namespace
}  // namespace yoco
