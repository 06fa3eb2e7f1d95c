// kv_store/redis_store.h against real redis-server processes (tests/support/redis_server.h,
// redis_cluster.h) on 127.0.0.1 (label integration;redis; skipped when redis-server is not
// installed): every store case over tcp and TLS to one server and to a Redis Cluster, AUTH, one
// server's outage behind the breaker, TLS verification, and the cache over memory + redis.
#include "kv_store/redis_store.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "kv_store/cache.h"
#include "kv_store/factory.h"
#include "model/safetensors.h"
#include "prefill_service/prompt_cache.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_pki.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;
using test::find_program;
using test::free_port;
using test::RedisCluster;
using test::RedisServer;

enum class RedisBackend { kTcp, kTls, kCluster, kClusterTls };

std::string backend_name(const ::testing::TestParamInfo<RedisBackend>& info) {
  switch (info.param) {
    case RedisBackend::kTcp:
      return "tcp";
    case RedisBackend::kTls:
      return "tls";
    case RedisBackend::kCluster:
      return "cluster";
    case RedisBackend::kClusterTls:
      return "cluster_tls";
  }
  return "?";
}

// Every KvStoreRedis case runs four times: over plain TCP and over TLS (with a client
// certificate) to one server, and over both to a Redis Cluster (3 masters, 3 replicas).
class KvStoreRedis : public ::testing::TestWithParam<RedisBackend> {
 protected:
  void SetUp() override {
    if (find_program("redis-server").empty() || find_program("redis-cli").empty())
      GTEST_SKIP() << "redis-server / redis-cli not installed (apt-get install redis-server): redis cases skipped";
    auto probe = make_redis_store(RedisOptions{});
    if (!probe.ok() && probe.status().code() == StatusCode::kUnimplemented)
      GTEST_SKIP() << "built without hiredis: " << probe.status().message();
    if (tls()) {
      pki_ = shared_pki();
      ASSERT_TRUE(pki_ != nullptr) << "openssl could not make the test certificates";
    }
    if (cluster()) {
      cluster_ = std::make_unique<RedisCluster>(pki());
      ASSERT_TRUE(cluster_->start()) << "the redis cluster did not start";
      return;
    }
    server_ = std::make_unique<RedisServer>(free_port(), password(), pki());
    ASSERT_TRUE(server_->start()) << "redis-server did not start";
  }
  virtual std::string password() const { return ""; }
  virtual bool tls() const { return GetParam() == RedisBackend::kTls || GetParam() == RedisBackend::kClusterTls; }
  virtual bool cluster() const {
    return GetParam() == RedisBackend::kCluster || GetParam() == RedisBackend::kClusterTls;
  }
  const test::TestPki* pki() const { return pki_; }
  // One PKI for the whole binary (key generation is the slow part).
  static const test::TestPki* shared_pki() {
    static test::TempDir dir;
    static const std::optional<test::TestPki> pki = test::TestPki::make(dir.path());
    return pki ? &*pki : nullptr;
  }

  // options()' command and connect timeouts: 200 ms, stretched in a sanitizer build (under TSan a
  // pipelined read of 20 values over TLS from a cluster, beside another test, took longer).
  static constexpr int kTimeoutMs = static_cast<int>(200 * test::kSanitizerSlowdown);
  RedisOptions options() const {
    RedisOptions o;
    if (cluster_) {
      o.cluster = true;
      for (int i = 0; i < 3; ++i) o.seeds.emplace_back("127.0.0.1", cluster_->node(i).port());
    } else {
      o.port = server_->port();
    }
    o.password = password();
    o.chunk_bytes = 64 << 10;
    o.command_timeout = std::chrono::milliseconds(kTimeoutMs);
    o.connect_timeout = std::chrono::milliseconds(kTimeoutMs);
    o.pool_size = 3;
    if (pki_) {
      o.tls = true;
      o.tls_options.ca_file = pki_->ca;
      o.tls_options.cert_file = pki_->client_cert;
      o.tls_options.key_file = pki_->client_key;
    }
    return o;
  }
  // The store URL the factory takes, with the breaker tuned for tests.
  std::string url() const {
    const std::string where =
        cluster_ ? std::string(pki_ ? "rediss" : "redis") + "-cluster://" + cluster_->seeds()
                 : std::string(pki_ ? "rediss" : "redis") + "://127.0.0.1:" + std::to_string(server_->port());
    std::string u =
        where +
        "?timeout_ms=200&connect_timeout_ms=200&pool=2&breaker_failures=3&breaker_cooldown_ms=400&breaker_slow_ms=1000";
    if (pki_) u += "&" + pki_->redis_url_query();
    return u;
  }
  std::unique_ptr<KvStore> store(const RedisOptions& o) {
    auto s = make_redis_store(o);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // The Redis name of a store key: PREFIX KEY, on a cluster PREFIX "{" KEY "}".
  std::string rk(const std::string& key) const { return cluster_ ? "yoco:{" + key + "}" : "yoco:" + key; }
  // redis-cli's output of one command (a cluster: to any node, following redirections).
  std::string cli(const std::string& command) { return cluster_ ? cluster_->cli(command) : server_->cli(command); }
  // Copies a Redis value (a cluster: across slots, so not with COPY).
  std::string copy_value(const std::string& from, const std::string& to) {
    if (!cluster_) return cli("COPY " + from + " " + to + " REPLACE");
    const std::string port = std::to_string(cluster_->any().port());
    const std::string rc = "redis-cli" + cluster_->tls_flags() + " -c -p " + port;
    RedisCluster::run(rc + " --raw GET '" + from + "' | head -c -1 | " + rc + " -x SET '" + to + "' >/dev/null");
    return cli("EXISTS '" + to + "'");
  }
  void stop_servers() {
    if (cluster_) cluster_->stop();
    else server_->stop();
  }
  std::vector<std::string> keys_matching(const std::string& pattern) {
    if (cluster_) return cluster_->keys(pattern);
    std::vector<std::string> out;
    std::string text = server_->cli("KEYS '" + pattern + "'");
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) out.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Chunk keys of a value, in chunk order.
  std::vector<std::string> chunks_of(const std::string& key) {
    auto ks = keys_matching(rk(key) + ":*");
    std::sort(ks.begin(), ks.end(), [](const std::string& a, const std::string& b) {
      return std::stoi(a.substr(a.rfind(':') + 1)) < std::stoi(b.substr(b.rfind(':') + 1));
    });
    return ks;
  }

  const test::TestPki* pki_ = nullptr;
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<RedisCluster> cluster_;
};

INSTANTIATE_TEST_SUITE_P(Transport, KvStoreRedis,
                         ::testing::Values(RedisBackend::kTcp, RedisBackend::kTls, RedisBackend::kCluster,
                                           RedisBackend::kClusterTls),
                         backend_name);

TEST_P(KvStoreRedis, LargeValueRoundTripInChunks) {
  auto s = store(options());
  ASSERT_TRUE(s);
  const std::string v = random_bytes((64 << 10) * 3 + 12345, 21);  // 4 chunks, binary
  ASSERT_TRUE(s->put("big", v, 0s).ok());
  auto r = s->get("big");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, v);
  EXPECT_EQ(chunks_of("big").size(), 4u);
  // Overwriting leaves only the new writer's chunks.
  const std::string w = random_bytes(1000, 22);
  ASSERT_TRUE(s->put("big", w, 0s).ok());
  EXPECT_EQ(value_of(s->get("big")), w);
  EXPECT_EQ(chunks_of("big").size(), 1u);
  ASSERT_TRUE(s->put("empty", "", 0s).ok());
  auto e = s->get("empty");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_TRUE((*e)->empty());
  ASSERT_TRUE(s->del("big").ok());
  EXPECT_FALSE(s->get("big")->has_value());
  EXPECT_TRUE(chunks_of("big").empty());
  EXPECT_EQ(s->stats().corrupt, 0u);
}

TEST_P(KvStoreRedis, PipelinedGetMany) {
  auto s = store(options());
  std::vector<std::string> keys;
  std::map<std::string, std::string> vals;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(key_name({i}));
    if (i % 3 == 0) continue;                                                  // absent
    vals[keys.back()] = random_bytes(static_cast<size_t>(i) * 9000, 100 + i);  // 0 .. 3 chunks
    const Status put = s->put(keys.back(), vals[keys.back()], 0s);
    ASSERT_TRUE(put.ok()) << keys.back() << ": " << put.to_string();
  }
  auto got = s->get_many(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status().to_string();
    if (vals.count(keys[i])) {
      ASSERT_TRUE(got[i]->has_value()) << keys[i];
      EXPECT_EQ(**got[i], vals[keys[i]]) << keys[i];
    } else {
      EXPECT_FALSE(got[i]->has_value()) << keys[i];
    }
  }
  // Sets for the document index.
  ASSERT_TRUE(s->set_add("docs:x", "doc-1").ok());
  ASSERT_TRUE(s->set_add("docs:x", "doc-2").ok());
  ASSERT_TRUE(s->set_remove("docs:x", "doc-1").ok());
  EXPECT_EQ(ok_value(s->set_members("docs:x")), (std::vector<std::string>{"doc-2"}));
  EXPECT_EQ(cli("SISMEMBER " + rk("docs:x") + " doc-2"), "1");
}

TEST_P(KvStoreRedis, TtlExpiry) {
  auto s = store(options());
  ASSERT_TRUE(s->put("short", random_bytes(200000, 5), 1s).ok());
  ASSERT_TRUE(s->put("long", "v", 0s).ok());
  EXPECT_TRUE(s->get("short")->has_value());
  const std::string pttl = cli("PTTL " + rk("short"));
  EXPECT_GT(std::stoi(pttl), 0) << pttl;
  for (const auto& ck : chunks_of("short")) EXPECT_GT(std::stoi(cli("PTTL " + ck)), 0) << ck;
  EXPECT_EQ(cli("PTTL " + rk("long")), "-1");
  std::this_thread::sleep_for(1200ms);
  EXPECT_FALSE(s->get("short")->has_value());
  EXPECT_TRUE(chunks_of("short").empty());
  EXPECT_TRUE(s->get("long")->has_value());
}

TEST_P(KvStoreRedis, DamagedMissingAndMixedChunksAreMisses) {
  auto s = store(options());
  const size_t n = (64 << 10) * 3 + 100;
  const std::string a = random_bytes(n, 1), b = random_bytes(n, 2);
  uint64_t corrupt = 0;
  // A flipped byte in a chunk.
  ASSERT_TRUE(s->put("flip", a, 0s).ok());
  auto ck = chunks_of("flip");
  ASSERT_EQ(ck.size(), 4u);
  cli("SETRANGE " + ck[2] + " 100 Z");
  auto r = s->get("flip");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt, ++corrupt);
  EXPECT_EQ(cli("EXISTS " + rk("flip")), "0");
  EXPECT_TRUE(chunks_of("flip").empty());
  // A missing chunk.
  ASSERT_TRUE(s->put("hole", a, 0s).ok());
  cli("DEL " + chunks_of("hole")[1]);
  r = s->get("hole");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt, ++corrupt);
  EXPECT_EQ(cli("EXISTS " + rk("hole")), "0");
  // Two writers' chunks mixed: writer B's chunk 1 in place of writer A's.
  ASSERT_TRUE(s->put("mix", a, 0s).ok());
  ASSERT_TRUE(s->put("other", b, 0s).ok());
  const auto ca = chunks_of("mix"), cb = chunks_of("other");
  EXPECT_EQ(copy_value(cb[1], ca[1]), "1");
  r = s->get("mix");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt, ++corrupt);
  EXPECT_EQ(cli("EXISTS " + rk("mix")), "0");
  EXPECT_EQ(value_of(s->get("other")), b);  // untouched
  // A damaged manifest.
  ASSERT_TRUE(s->put("man", a, 0s).ok());
  cli("SETRANGE " + rk("man") + " 20 Q");
  EXPECT_FALSE(s->get("man")->has_value());
  EXPECT_EQ(s->stats().corrupt, ++corrupt);
  EXPECT_EQ(cli("EXISTS " + rk("man")), "0");
  // Within get_many, one bad value does not spoil the others.
  ASSERT_TRUE(s->put("g1", a, 0s).ok());
  ASSERT_TRUE(s->put("g2", b, 0s).ok());
  cli("SETRANGE " + chunks_of("g1")[0] + " 0 X");
  std::vector<std::string> keys{"g1", "g2"};
  auto many = s->get_many(keys);
  EXPECT_FALSE(many[0]->has_value());
  EXPECT_EQ(**many[1], b);
}

TEST_P(KvStoreRedis, ThreadsShareTheConnectionPool) {
  RedisOptions o = options();
  o.pool_size = 2;  // fewer connections than threads: callers wait their turn
  o.command_timeout = 2000ms;
  auto s = store(o);
  std::atomic<int> bad{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string key = key_name({t, i});
        const std::string v = random_bytes(70000 + static_cast<size_t>(i), static_cast<uint32_t>(t * 100 + i));
        if (!s->put(key, v, 60s).ok()) ++bad;
        if (value_of(s->get(key)) != v) ++bad;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(s->stats().hits, 160u);
  EXPECT_EQ(s->stats().errors, 0u);
}

TEST_P(KvStoreRedis, ConcurrentOverwritesLeaveNoOrphanChunks) {
  auto s = store(options());
  std::vector<std::thread> th;
  for (int t = 0; t < 3; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i)
        (void)s->put("same", random_bytes((64 << 10) * (1 + (i + t) % 3), static_cast<uint32_t>(t * 50 + i)), 0s);
    });
  for (auto& x : th) x.join();
  auto v = s->get("same");
  ASSERT_TRUE(v.ok() && v->has_value());
  // Only the surviving value's chunks remain: every displaced manifest's chunks were removed.
  EXPECT_EQ(chunks_of("same").size(), (*v)->size() / (64 << 10));
}

class KvStoreRedisAuth : public KvStoreRedis {
 protected:
  std::string password() const override { return "s3cret-pw"; }
};
INSTANTIATE_TEST_SUITE_P(Transport, KvStoreRedisAuth, ::testing::Values(RedisBackend::kTcp, RedisBackend::kTls),
                         backend_name);

TEST_P(KvStoreRedisAuth, PasswordRequired) {
  auto good = store(options());
  ASSERT_TRUE(good->put("k", "v", 0s).ok());
  EXPECT_EQ(value_of(good->get("k")), "v");
  RedisOptions with_user = options();
  with_user.user = "default";  // ACL form: AUTH default <password>
  EXPECT_EQ(value_of(store(with_user)->get("k")), "v");
  RedisOptions wrong = options();
  wrong.password = "nope";
  auto bad = store(wrong);
  auto r = bad->get("k");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("AUTH"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(r.status().message().find("nope"), std::string::npos);  // never the secret
  EXPECT_FALSE(bad->put("k", "w", 0s).ok());
  RedisOptions none = options();
  none.password.clear();
  EXPECT_FALSE(store(none)->get("k").ok());
  // Through the factory URL, with a database.
  std::string u = url();
  u.insert(u.find("://") + 3, ":s3cret-pw@");
  u.insert(u.find('?'), "/2");
  auto f = make_kv_store(u);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_TRUE((*f)->put("in-db-2", "x", 0s).ok());
  EXPECT_EQ(server_->cli("-n 2 EXISTS yoco:in-db-2"), "1");
  EXPECT_EQ(server_->cli("-n 0 EXISTS yoco:in-db-2"), "0");
}

// One server's outage (a cluster's: KvStoreRedisCluster.*).
class KvStoreRedisOneServer : public KvStoreRedis {};
INSTANTIATE_TEST_SUITE_P(Transport, KvStoreRedisOneServer, ::testing::Values(RedisBackend::kTcp, RedisBackend::kTls),
                         backend_name);

TEST_P(KvStoreRedisOneServer, BreakerWhenTheServerIsKilledAndRestarted) {
  auto made = make_kv_store(url());
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  KvStore& s = **made;
  ASSERT_TRUE(s.put("k", "v", 0s).ok());
  ASSERT_TRUE(s.get("k")->has_value());
  server_->stop();  // SIGKILL
  double worst = 0;
  for (int i = 0; i < 30; ++i) {
    const auto t0 = Clock::now();
    (void)s.get("k");
    (void)s.put("k", "v", 0s);
    worst = std::max(worst, ms_since(t0));
  }
  EXPECT_LT(worst, 2 * 200 + 300) << "a call waited past the timeouts";
  auto st = s.stats();
  EXPECT_GE(st.breaker_trips, 1u);
  EXPECT_EQ(st.breaker_open, 1u);
  EXPECT_GT(st.dropped, 20u);
  // While open: misses and dropped puts, at once.
  const auto t0 = Clock::now();
  auto r = s.get("k");
  EXPECT_TRUE(r.ok() && !r->has_value());
  EXPECT_EQ(s.put("k", "v", 0s).code(), StatusCode::kUnavailable);
  EXPECT_LT(ms_since(t0), 100);
  // Back on the same port: after the cool-down the probe closes the breaker.
  RedisServer again(server_->port(), "", pki());
  ASSERT_TRUE(again.start());
  std::this_thread::sleep_for(1000ms);  // past a doubled cool-down
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    if (s.put("k2", "back", 0s).ok()) closed = true;
    else std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(closed);
  EXPECT_EQ(s.stats().breaker_open, 0u);
  auto h = s.get("k2");
  ASSERT_TRUE(h.ok() && h->has_value());
  EXPECT_EQ(**h, "back");
  EXPECT_EQ(again.cli("KEYS 'yoco:__yoco_probe__*'"), "");  // the probe cleaned up
}

TEST_P(KvStoreRedisOneServer, BreakerWhenTheServerIsStoppedAndContinued) {
  auto made = make_kv_store(url());
  ASSERT_TRUE(made.ok());
  KvStore& s = **made;
  ASSERT_TRUE(s.put("k", "v", 0s).ok());
  server_->signal(SIGSTOP);
  int timeouts = 0;
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto r = s.get("k");
    worst = std::max(worst, ms_since(t0));
    if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) ++timeouts;
  }
  EXPECT_EQ(timeouts, 3);       // then the breaker opened
  EXPECT_LT(worst, 200 + 300);  // the command timeout, not more
  auto t0 = Clock::now();
  for (int i = 0; i < 100; ++i) {
    auto r = s.get("k");
    EXPECT_TRUE(r.ok() && !r->has_value());
  }
  EXPECT_LT(ms_since(t0), 200);  // 100 calls, none waiting on the stopped server
  server_->signal(SIGCONT);
  std::this_thread::sleep_for(500ms);  // the cool-down passes
  auto h = s.get("k");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_TRUE(h->has_value());
  EXPECT_EQ(**h, "v");
  EXPECT_EQ(s.stats().breaker_open, 0u);
}

TEST_P(KvStoreRedis, CacheOverTieredMemoryAndRedis) {
  const ModelConfig c = tiny_config(0);
  auto made = make_kv_store("memory:16MiB," + url());
  ASSERT_TRUE(made.ok());
  KvCache cache(**made, cache_options(c, 4));
  auto tokens = iota_tokens(22);
  SequenceState st = random_state(c, 22, 8);
  auto rec = save_document(cache, tokens, st, c, 600s);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(cli("SISMEMBER " + rk("docs:" + fingerprint_hex(kFp)) + " " + rec->id), "1");
  // A second process: its own memory tier is empty, redis has everything.
  auto other = make_kv_store("memory:16MiB," + url());
  KvCache cache2(**other, cache_options(c, 4));
  EXPECT_EQ(ok_value(cache2.list_documents()), std::vector<std::string>{rec->id});
  auto doc = cache2.load_document(rec->id);
  ASSERT_TRUE(doc.ok() && doc->has_value() && (*doc)->cached.has_value());
  SequenceState back;
  ASSERT_TRUE(restore_prefix(cache2, *(*doc)->cached, c, back).ok());
  EXPECT_EQ(serialize_state(back, c, kFp), serialize_state(st, c, kFp));
  // Redis gone: the memory tier still serves, lookups never fail.
  stop_servers();
  EXPECT_EQ(cache2.longest_cached_prefix(tokens), 5);
  EXPECT_FALSE(cache2.delete_document(rec->id).ok());  // the redis copy could not be deleted: said so
}

// TLS only: what is verified, and how failures read. The server requires a client certificate.
class KvStoreRedisTls : public KvStoreRedis {
 protected:
  bool tls() const override { return true; }
  bool cluster() const override { return false; }
  // A store that does not retry through a breaker, so each call shows its own failure.
  Result<std::unique_ptr<KvStore>> direct(const RedisOptions& o) { return make_redis_store(o); }
  static Status get_status(KvStore& s) {
    auto r = s.get("k");
    return r.ok() ? Status::Ok() : r.status();
  }
  // Of a freshly made store (which must be made).
  static Status get_status(Result<std::unique_ptr<KvStore>> made) {
    if (!made.ok()) return made.status();
    return get_status(**made);
  }
};

TEST_F(KvStoreRedisTls, VerifiesTheServerCertificateAndName) {
  auto good = store(options());
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->put("k", "v", 0s).ok());
  // A CA that did not sign the server's certificate.
  RedisOptions rogue = options();
  rogue.tls_options.ca_file = pki()->rogue_ca;
  auto s1 = direct(rogue);
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  Status st = get_status(**s1);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("certificate verification failed"), std::string::npos) << st.to_string();
  // The right CA, but a name the certificate does not carry.
  RedisOptions other_name = options();
  other_name.tls_options.server_name = "redis.example.org";
  st = get_status(direct(other_name));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("redis.example.org"), std::string::npos) << st.to_string();
  // The DNS name in the certificate works (SNI + host check), as does the IP it names.
  RedisOptions by_name = options();
  by_name.host = "localhost";
  by_name.tls_options.server_name = "localhost";
  EXPECT_EQ(value_of(store(by_name)->get("k")), "v");
  // tls_verify=0 encrypts without checking: the rogue CA is then accepted.
  rogue.tls_options.verify = false;
  EXPECT_EQ(value_of(store(rogue)->get("k")), "v");
}

TEST_F(KvStoreRedisTls, ClientCertificateIsPresentedAndRequired) {
  RedisOptions no_cert = options();
  no_cert.tls_options.cert_file.clear();
  no_cert.tls_options.key_file.clear();
  const auto t0 = Clock::now();
  Status st = get_status(direct(no_cert));
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_LT(ms_since(t0), 2 * kTimeoutMs + 300);
  // A certificate with the wrong key is refused when the store is made, naming tls_key.
  RedisOptions mismatched = options();
  mismatched.tls_options.key_file = pki()->server_key;
  auto bad = direct(mismatched);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tls_key"), std::string::npos) << bad.status().to_string();
}

TEST_F(KvStoreRedisTls, PlainClientOnATlsPortAndTlsClientOnAPlainPortFailWithinTheTimeouts) {
  RedisOptions plain = options();
  plain.tls = false;
  plain.tls_options = {};
  auto t0 = Clock::now();
  Status st = get_status(direct(plain));
  EXPECT_FALSE(st.ok());
  EXPECT_LT(ms_since(t0), 2 * kTimeoutMs + 300) << st.to_string();
  RedisServer plain_server(free_port(), "");
  ASSERT_TRUE(plain_server.start());
  RedisOptions tls_to_plain = options();
  tls_to_plain.port = plain_server.port();
  t0 = Clock::now();
  st = get_status(direct(tls_to_plain));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tls handshake"), std::string::npos) << st.to_string();
  EXPECT_LT(ms_since(t0), 2 * kTimeoutMs + 300) << st.to_string();
}

}  // namespace
}  // namespace yoco
