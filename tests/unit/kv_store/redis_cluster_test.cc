// kv_store/redis_cluster.h: a store over a Redis Cluster of real redis-server processes
// (tests/support/redis_cluster.h; label integration;redis, ctest kv_store_redis_cluster_test):
// slots as the server computes them, a master killed under load, resharding while reading, a
// node that stops answering.
#include "kv_store/redis_cluster.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "kv_store/factory.h"
#include "kv_store/redis_slot.h"
#include "kv_store/redis_store.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/unit/kv_store/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;
using test::find_program;
using test::RedisCluster;
using test::RedisServer;

// Faults of a Redis Cluster (3 masters + 3 replicas, node timeout 1 s) under the store built
// from a redis-cluster:// URL (a breaker per node), plain TCP.
class KvStoreRedisCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (find_program("redis-server").empty() || find_program("redis-cli").empty())
      GTEST_SKIP() << "redis-server / redis-cli not installed (apt-get install redis-server): redis cases skipped";
    auto probe = make_redis_store(RedisOptions{});
    if (!probe.ok() && probe.status().code() == StatusCode::kUnimplemented)
      GTEST_SKIP() << "built without hiredis: " << probe.status().message();
    ASSERT_TRUE(cluster_.start()) << "the redis cluster did not start";
  }
  std::unique_ptr<KvStore> make(const std::string& params = "") {
    auto s = make_kv_store("redis-cluster://" + cluster_.seeds() +
                           "?timeout_ms=200&connect_timeout_ms=200&pool=2&chunk_bytes=16KiB&breaker_failures=2"
                           "&breaker_cooldown_ms=300&breaker_slow_ms=1000" +
                           params);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // n keys with values of 1 to 4 chunks; all written.
  void fill(KvStore& s, int n) {
    for (int i = 0; i < n; ++i) {
      keys_.push_back(key_name({i}));
      values_.push_back(random_bytes(1000 + static_cast<size_t>(i % 4) * 17000, static_cast<uint32_t>(i)));
      ASSERT_TRUE(s.put(keys_.back(), values_.back(), 0s).ok()) << keys_.back();
    }
  }
  static std::string rk(const std::string& key) { return "yoco:{" + key + "}"; }

  // Readers checking every value until stopped: a failed call or a wrong value is counted.
  struct Load {
    std::atomic<bool> stop{false};
    std::atomic<int> errors{0}, wrong{0}, hits{0}, misses{0};
    std::atomic<int> slowest_ms{0};
    std::vector<std::thread> threads;
    void start(KvStore& s, const std::vector<std::string>& keys, const std::vector<std::string>& values,
               int readers = 3) {
      for (int t = 0; t < readers; ++t)
        threads.emplace_back([&, t] {
          std::mt19937 g(static_cast<uint32_t>(t));
          while (!stop) {
            std::vector<std::string> ks;
            std::vector<size_t> idx;
            for (int j = 0; j < 6; ++j) {
              idx.push_back(g() % keys.size());
              ks.push_back(keys[idx.back()]);
            }
            const auto t0 = Clock::now();
            auto got = s.get_many(ks);
            const int ms = static_cast<int>(ms_since(t0));
            if (ms > slowest_ms) slowest_ms = ms;
            for (size_t j = 0; j < ks.size(); ++j) {
              if (!got[j].ok()) ++errors;
              else if (!got[j]->has_value()) ++misses;
              else if (**got[j] != values[idx[j]]) ++wrong;
              else ++hits;
            }
          }
        });
    }
    void finish() {
      stop = true;
      for (auto& t : threads) t.join();
      threads.clear();
    }
    ~Load() { finish(); }
  };
  // Whether every key is a hit with its value, within `limit`.
  bool all_hit(KvStore& s, const std::vector<size_t>& which, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    std::vector<std::string> ks;
    for (size_t i : which) ks.push_back(keys_[i]);
    while (Clock::now() < until) {
      auto got = s.get_many(ks);
      bool ok = true;
      for (size_t j = 0; j < ks.size(); ++j)
        ok = ok && got[j].ok() && got[j]->has_value() && **got[j] == values_[which[j]];
      if (ok) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  RedisCluster cluster_;
  std::vector<std::string> keys_, values_;
};

TEST_F(KvStoreRedisCluster, KeySlotsMatchTheServerAndAValueLivesInOneSlot) {
  std::vector<std::string> names{"foo",
                                 "bar",
                                 "yoco:{k-1}",
                                 "yoco:{k-1}:0123456789abcdef:3",
                                 "{user1000}.following",
                                 "foo{}{bar}",
                                 "foo{{bar}}zap",
                                 "foo{bar}{zap}",
                                 "a}b{c",
                                 "{}",
                                 "}{"};
  std::mt19937 g(7);
  for (int i = 0; i < 40; ++i) {
    std::string k;
    for (int j = 0; j < 1 + i % 13; ++j) k += "abcdefghijklmnopqrstuvwxyz0123456789:-_{}"[g() % 41];
    names.push_back(k);
  }
  for (const auto& k : names)
    EXPECT_EQ(redis::key_slot(k), std::atoi(cluster_.cli("CLUSTER KEYSLOT '" + k + "'").c_str())) << k;
  auto s = make();
  ASSERT_TRUE(s);
  fill(*s, 30);
  // Every part of a value (manifest and chunks) is on the one master that serves its slot.
  const auto parts = cluster_.keys(rk(keys_[3]) + "*");
  ASSERT_EQ(parts.size(), 1u + 4u);  // 52000 bytes in 16 KiB chunks, and the manifest
  RedisServer* owner = cluster_.by_port(cluster_.master_of(rk(keys_[3])));
  ASSERT_TRUE(owner);
  for (const auto& p : parts) {
    EXPECT_EQ(redis::key_slot(p), redis::key_slot(rk(keys_[3]))) << p;
    EXPECT_EQ(owner->cli("EXISTS '" + p + "'"), "1") << p;  // no -c: on this node itself
  }
  // The values spread over all three masters, and all read back.
  std::set<int> owners;
  for (const auto& k : keys_) owners.insert(cluster_.master_of(rk(k)));
  EXPECT_EQ(owners.size(), 3u);
  std::vector<size_t> all(keys_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  EXPECT_TRUE(all_hit(*s, all, 0ms + 1s));
  EXPECT_EQ(s->stats().errors, 0u);
}

// SIGKILL a master under load: no call fails and no value is wrong; its keys are misses while it
// is down (the node's breaker), the other masters keep serving, and once its replica is promoted
// (the map is reloaded) its keys are hits again.
TEST_F(KvStoreRedisCluster, MasterKilledUnderLoadCostsNoRequest) {
  auto s = make();
  ASSERT_TRUE(s);
  fill(*s, 60);
  ASSERT_TRUE(cluster_.wait_replicated(30s)) << "the replicas did not catch up";
  const int victim = cluster_.master_of(rk(keys_[0]));
  std::vector<size_t> on_victim, elsewhere;
  for (size_t i = 0; i < keys_.size(); ++i)
    (cluster_.master_of(rk(keys_[i])) == victim ? on_victim : elsewhere).push_back(i);
  ASSERT_FALSE(on_victim.empty());
  ASSERT_FALSE(elsewhere.empty());
  Load load;
  load.start(*s, keys_, values_);
  std::this_thread::sleep_for(300ms);
  const int hits_before = load.hits;
  cluster_.by_port(victim)->stop();  // SIGKILL
  const auto killed = Clock::now();
  // While it is down: its keys are misses, the others hits.
  std::this_thread::sleep_for(300ms);
  const int misses_down = load.misses, hits_down = load.hits;
  std::this_thread::sleep_for(200ms);
  EXPECT_GT(load.misses.load(), 0);
  EXPECT_GT(load.hits.load(), hits_down) << "the other masters stopped serving";
  EXPECT_GE(misses_down, 0);
  // The replica takes over (node timeout 1 s, then the election).
  bool promoted = false;
  while (!promoted && ms_since(killed) < 20000) {
    const auto m = cluster_.masters();
    promoted = m.size() == 3 && std::find(m.begin(), m.end(), victim) == m.end();
    if (!promoted) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(promoted) << "no replica was promoted";
  EXPECT_TRUE(all_hit(*s, on_victim, 0ms + 5s)) << "hits did not resume after the promotion";
  load.finish();
  EXPECT_GT(hits_before, 0);
  EXPECT_EQ(load.errors.load(), 0) << "a call failed";
  EXPECT_EQ(load.wrong.load(), 0) << "a wrong value was returned";
  EXPECT_GE(s->stats().breaker_trips, 1u);
  EXPECT_LT(load.slowest_ms.load(), 2 * 200 + 400) << "a call waited past the timeouts";
}

// A slot moved while reading: a value whose chunks (then also its manifest) are already on the
// importing node is read through ASK; after the slot is handed over, through MOVED and a new map.
// Then redis-cli --cluster reshard moves 1000 slots under load: every read is an exact hit.
TEST_F(KvStoreRedisCluster, ReshardingWhileReadingFollowsAskAndMoved) {
  auto s = make();
  ASSERT_TRUE(s);
  fill(*s, 40);
  const std::string key = keys_[3];  // 4 chunks
  const int src = cluster_.master_of(rk(key));
  int dst = 0;
  for (int m : cluster_.masters())
    if (m != src) dst = m;
  ASSERT_NE(dst, 0);
  const std::string slot = std::to_string(redis::key_slot(rk(key)));
  RedisServer &from = *cluster_.by_port(src), &to = *cluster_.by_port(dst);
  const std::string from_id = cluster_.id_of(src), to_id = cluster_.id_of(dst);
  ASSERT_EQ(to.cli("CLUSTER SETSLOT " + slot + " IMPORTING " + from_id), "OK");
  ASSERT_EQ(from.cli("CLUSTER SETSLOT " + slot + " MIGRATING " + to_id), "OK");
  auto migrate = [&](const std::vector<std::string>& ks) {
    std::string cmd = "MIGRATE 127.0.0.1 " + std::to_string(dst) + " '' 0 5000 KEYS";
    for (const auto& k : ks) cmd += " '" + k + "'";
    return from.cli(cmd);
  };
  auto parts = cluster_.keys(rk(key) + ":*");
  ASSERT_EQ(parts.size(), 4u);
  ASSERT_EQ(migrate(parts), "OK");  // the chunks moved, the manifest not yet
  EXPECT_TRUE(value_of(s->get(key)) == values_[3]);
  ASSERT_EQ(migrate({rk(key)}), "OK");  // now everything, the slot still migrating
  EXPECT_TRUE(value_of(s->get(key)) == values_[3]);
  for (int port : {dst, src})
    ASSERT_EQ(cluster_.by_port(port)->cli("CLUSTER SETSLOT " + slot + " NODE " + to_id), "OK");
  EXPECT_TRUE(value_of(s->get(key)) == values_[3]);  // MOVED
  EXPECT_TRUE(value_of(s->get(key)) == values_[3]);
  EXPECT_EQ(s->stats().errors, 0u);
  // A whole slot range, under load.
  Load load;
  load.start(*s, keys_, values_);
  std::this_thread::sleep_for(200ms);
  const std::string out =
      RedisCluster::run("redis-cli --cluster reshard 127.0.0.1:" + std::to_string(src) + " --cluster-from " + from_id +
                        " --cluster-to " + to_id + " --cluster-slots 1000 --cluster-yes --cluster-pipeline 2 2>&1");
  std::this_thread::sleep_for(200ms);
  load.finish();
  EXPECT_TRUE(cluster_.wait_ok(5s)) << out;
  EXPECT_GT(load.hits.load(), 0);
  EXPECT_EQ(load.errors.load(), 0);
  EXPECT_EQ(load.misses.load(), 0);
  EXPECT_EQ(load.wrong.load(), 0);
  std::vector<size_t> all(keys_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  EXPECT_TRUE(all_hit(*s, all, 0ms + 1s));
}

// A master that stops answering (SIGSTOP): calls wait at most the command timeout, then its
// breaker makes its keys misses at once while the other masters keep serving hits; after it
// continues (or its replica took over), its keys are hits again.
TEST_F(KvStoreRedisCluster, SlowNodeKeepsRequestsBounded) {
  auto s = make();
  ASSERT_TRUE(s);
  fill(*s, 30);
  ASSERT_TRUE(cluster_.wait_replicated(30s)) << "the replicas did not catch up";
  const int slow = cluster_.master_of(rk(keys_[0]));
  size_t other = 0;
  while (cluster_.master_of(rk(keys_[other])) == slow) ++other;
  cluster_.by_port(slow)->signal(SIGSTOP);
  int fast_misses = 0, errors = 0;
  double worst = 0;
  for (int i = 0; i < 12; ++i) {
    auto t0 = Clock::now();
    auto r = s->get(keys_[0]);
    const double ms = ms_since(t0);
    worst = std::max(worst, ms);
    if (!r.ok()) ++errors;
    else if (!r->has_value() && ms < 50) ++fast_misses;
    EXPECT_TRUE(value_of(s->get(keys_[other])) == values_[other]) << "a healthy master's key, call " << i;
    t0 = Clock::now();
    EXPECT_FALSE(s->put(keys_[0], values_[0], 0s).ok());  // a write to it: refused, never waiting long
    worst = std::max(worst, ms_since(t0));
  }
  cluster_.by_port(slow)->signal(SIGCONT);
  EXPECT_EQ(errors, 0);
  EXPECT_LT(worst, 200 + 300) << "a call waited past the command timeout";
  EXPECT_GE(fast_misses, 8) << "the stopped node's breaker did not turn its keys into fast misses";
  EXPECT_GE(s->stats().breaker_trips, 1u);
  EXPECT_TRUE(all_hit(*s, {0}, 0ms + 10s)) << "hits did not resume";
}

}  // namespace
}  // namespace yoco
