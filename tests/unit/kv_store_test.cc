// The KV store (kv_store/): object format, hash chain, documents, the memory / dir / tiered
// backends, the circuit breaker and the cache with the prefill worker's prompt cache over it
// (label unit), and the redis backend against a real redis-server this file starts on
// 127.0.0.1 (suites KvStoreRedis*, label integration;redis; skipped when redis-server is not
// installed).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/checksum.h"
#include "common/document_id.h"
#include "common/json.h"
#include "kv_store/cache.h"
#include "kv_store/circuit_breaker.h"
#include "kv_store/dir_store.h"
#include "kv_store/factory.h"
#include "kv_store/format.h"
#include "kv_store/memory_store.h"
#include "kv_store/redis_slot.h"
#include "kv_store/redis_store.h"
#include "kv_store/tiered_store.h"
#include "kv_store/util.h"
#include "model/safetensors.h"
#include "prefill_service/prompt_cache.h"
#include "tests/unit/test_pki.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kFp = 0x1234abcd5678ef01ull;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g() & 0xff);
  return s;
}

std::vector<int32_t> iota_tokens(int n, int start = 1) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

// A get's outcome as text: the value, "<miss>" or "<error: ...>".
std::string value_of(const KvGetResult& r) {
  if (!r.ok()) return "<error: " + r.status().to_string() + ">";
  return r.value() ? *r.value() : "<miss>";
}

template <class T>
T ok_value(Result<T> r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    return T{};
  }
  return std::move(r).value();
}

// "k" + the numbers joined by '-' (appends: GCC 12 warns falsely on "lit" + std::string&&).
std::string key_name(std::initializer_list<int> parts) {
  std::string s = "k";
  for (int p : parts) {
    if (s.size() > 1) s += '-';
    s += std::to_string(p);
  }
  return s;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// ---- format ---------------------------------------------------------------------------------

TEST(KvStoreFormat, BlockRoundTripF32IsExact) {
  const int B = 4, D = 8;
  auto k = random_floats(B * D, 1), v = random_floats(B * D, 2);
  std::string bytes = encode_kv_block(k.data(), v.data(), B, D, KvDType::kF32, kFp, 0);
  EXPECT_EQ(bytes.size(), kObjectHeaderBytes + 2 * B * D * 4);
  auto obj = decode_object(bytes, ObjectKind::kKvBlock, kFp);
  ASSERT_TRUE(obj.ok()) << obj.status().to_string();
  std::vector<float> k2(B * D), v2(B * D);
  ASSERT_TRUE(decode_kv_block(*obj, B, D, k2.data(), v2.data()).ok());
  EXPECT_EQ(k, k2);
  EXPECT_EQ(v, v2);
  EXPECT_FALSE(decode_kv_block(*obj, B + 1, D, k2.data(), v2.data()).ok());
  EXPECT_FALSE(decode_kv_block(*obj, B, D * 2, k2.data(), v2.data()).ok());
}

TEST(KvStoreFormat, BlockRoundTripBf16RoundsToNearestEven) {
  const int B = 3, D = 5;
  auto k = random_floats(B * D, 3), v = random_floats(B * D, 4);
  std::string bytes = encode_kv_block(k.data(), v.data(), B, D, KvDType::kBF16, kFp, 0);
  EXPECT_EQ(bytes.size(), kObjectHeaderBytes + 2 * B * D * 2);
  auto obj = decode_object(bytes, ObjectKind::kKvBlock, kFp);
  ASSERT_TRUE(obj.ok()) << obj.status().to_string();
  EXPECT_EQ(obj->dtype, ObjectDType::kBF16);
  std::vector<float> k2(B * D), v2(B * D);
  ASSERT_TRUE(decode_kv_block(*obj, B, D, k2.data(), v2.data()).ok());
  for (int i = 0; i < B * D; ++i) {
    EXPECT_EQ(k2[i], bf16_to_f32(f32_to_bf16(k[i])));
    EXPECT_EQ(v2[i], bf16_to_f32(f32_to_bf16(v[i])));
  }
  // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
  float tie = 1.0f + 1.0f / 256, one = 1.0f;
  std::string b2 = encode_kv_block(&tie, &one, 1, 1, KvDType::kBF16, kFp, 0);
  auto o2 = decode_object(b2, ObjectKind::kKvBlock, kFp);
  ASSERT_TRUE(o2.ok());
  float kk, vv;
  ASSERT_TRUE(decode_kv_block(*o2, 1, 1, &kk, &vv).ok());
  EXPECT_EQ(kk, 1.0f);
}

// Header field offsets (format.h).
constexpr size_t kOffVersion = 8, kOffKind = 12, kOffFp = 16, kOffDType = 24, kOffNDims = 28, kOffDims = 32,
                 kOffPayloadBytes = 64, kOffExpiry = 72, kOffPayloadCrc = 80, kOffHeaderCrc = 84;

void set_u32(std::string& s, size_t off, uint32_t v) { std::memcpy(s.data() + off, &v, 4); }
void set_u64(std::string& s, size_t off, uint64_t v) { std::memcpy(s.data() + off, &v, 8); }
void reseal_header(std::string& s) { set_u32(s, kOffHeaderCrc, crc32c(s.data(), kOffHeaderCrc)); }

std::string sample_block() {
  auto k = random_floats(2 * 4, 5), v = random_floats(2 * 4, 6);
  return encode_kv_block(k.data(), v.data(), 2, 4, KvDType::kF32, kFp, 0);
}

void expect_error(const std::string& bytes, StatusCode code, const std::string& needle,
                  ObjectKind kind = ObjectKind::kKvBlock, uint64_t fp = kFp) {
  auto r = decode_object(bytes, kind, fp);
  ASSERT_FALSE(r.ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

TEST(KvStoreFormat, EveryHeaderFieldIsChecked) {
  const std::string good = sample_block();
  ASSERT_TRUE(decode_object(good, ObjectKind::kKvBlock, kFp).ok());
  auto with = [&](auto&& edit, bool reseal = true) {
    std::string s = good;
    edit(s);
    if (reseal) reseal_header(s);
    return s;
  };
  expect_error(good.substr(0, 20), StatusCode::kDataLoss, "truncated");
  expect_error("", StatusCode::kDataLoss, "truncated");
  expect_error(with([](std::string& s) { s[3] = 'X'; }), StatusCode::kDataLoss, "magic");
  expect_error(with([](std::string& s) { s[kOffFp] ^= 1; }, false), StatusCode::kDataLoss, "header checksum");
  expect_error(with([](std::string& s) { s[kOffHeaderCrc] ^= 1; }, false), StatusCode::kDataLoss, "header checksum");
  expect_error(with([](std::string& s) { set_u32(s, kOffVersion, 2); }), StatusCode::kFailedPrecondition, "version");
  expect_error(with([](std::string& s) { set_u32(s, kOffKind, 2); }), StatusCode::kDataLoss, "kind");
  expect_error(good, StatusCode::kDataLoss, "kind", ObjectKind::kDocument);
  expect_error(with([](std::string& s) { set_u64(s, kOffFp, 42); }), StatusCode::kFailedPrecondition, "fingerprint");
  expect_error(good, StatusCode::kFailedPrecondition, "fingerprint", ObjectKind::kKvBlock, kFp + 1);
  expect_error(with([](std::string& s) { set_u32(s, kOffDType, 9); }), StatusCode::kDataLoss, "dtype");
  expect_error(with([](std::string& s) { set_u32(s, kOffDType, 2); }), StatusCode::kDataLoss, "dtype");
  expect_error(with([](std::string& s) { set_u32(s, kOffNDims, 0); }), StatusCode::kDataLoss, "ndims");
  expect_error(with([](std::string& s) { set_u32(s, kOffNDims, 5); }), StatusCode::kDataLoss, "ndims");
  expect_error(with([](std::string& s) { set_u32(s, kOffNDims, 3); }), StatusCode::kDataLoss, "ndims");
  expect_error(with([](std::string& s) { set_u64(s, kOffDims + 16, 7); }), StatusCode::kDataLoss, "unused dims");
  expect_error(with([](std::string& s) { set_u64(s, kOffDims, 3); }), StatusCode::kDataLoss, "dims imply");
  expect_error(with([](std::string& s) { set_u64(s, kOffDims, 0); }), StatusCode::kDataLoss, "rows");
  expect_error(with([](std::string& s) { set_u64(s, kOffDims + 8, uint64_t{1} << 62); }), StatusCode::kDataLoss,
               "kv_dim");
  expect_error(with([](std::string& s) { set_u64(s, kOffPayloadBytes, 8); }), StatusCode::kDataLoss, "dims imply");
  expect_error(good.substr(0, good.size() - 1), StatusCode::kDataLoss, "truncated");
  expect_error(good + "x", StatusCode::kDataLoss, "trailing");
  expect_error(with([](std::string& s) { s[kObjectHeaderBytes + 5] ^= 0x10; }), StatusCode::kDataLoss,
               "payload checksum");
  expect_error(with([](std::string& s) { s[kOffPayloadCrc] ^= 1; }), StatusCode::kDataLoss, "payload checksum");
  expect_error(with([](std::string& s) { set_u64(s, kOffExpiry, static_cast<uint64_t>(-5)); }), StatusCode::kDataLoss,
               "negative expiry");
}

TEST(KvStoreFormat, EverySingleBitFlipAndTruncationIsRejected) {
  const std::string good = sample_block();
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string s = good;
      s[i] ^= static_cast<char>(1 << bit);
      ASSERT_FALSE(decode_object(s, ObjectKind::kKvBlock, kFp).ok()) << "byte " << i << " bit " << bit;
    }
  }
  for (size_t n = 0; n < good.size(); ++n)
    ASSERT_FALSE(decode_object(good.substr(0, n), ObjectKind::kKvBlock, kFp).ok());
  // Random garbage of every small length, and garbage behind a valid magic: errors, no crash.
  std::mt19937 g(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s = random_bytes(g() % 200, g());
    if (i % 2 && s.size() >= 8) std::memcpy(s.data(), "YOCOKVS1", 8);
    EXPECT_FALSE(decode_object(s, ObjectKind::kKvBlock, kFp).ok());
  }
}

TEST(KvStoreFormat, ExpiredObjectIsNotFound) {
  auto k = random_floats(4, 1);
  const int64_t now = unix_ms_now();
  std::string past = encode_kv_block(k.data(), k.data(), 1, 4, KvDType::kF32, kFp, now - 1);
  expect_error(past, StatusCode::kNotFound, "expired");
  std::string future = encode_kv_block(k.data(), k.data(), 1, 4, KvDType::kF32, kFp, now + 60000);
  EXPECT_TRUE(decode_object(future, ObjectKind::kKvBlock, kFp).ok());
  EXPECT_FALSE(decode_object(future, ObjectKind::kKvBlock, kFp, now + 60001).ok());
}

TEST(KvStoreFormat, OpaqueObjectRoundTrip) {
  Object o;
  o.kind = ObjectKind::kStateSnapshot;
  o.fingerprint = kFp;
  o.payload = random_bytes(1000, 9);
  o.dims = {o.payload.size()};
  auto back = decode_object(encode_object(o), ObjectKind::kStateSnapshot, kFp);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->payload, o.payload);
  EXPECT_EQ(back->dtype, ObjectDType::kBytes);
}

// ---- hash chain, ids, records ---------------------------------------------------------------

TEST(KvStoreChain, SameTokensSameKeysAndChangesPropagate) {
  const int B = 4;
  auto t = iota_tokens(18);  // 4 full blocks + 2 tokens
  auto a = chain_keys(t, B, kFp), b = chain_keys(t, B, kFp);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  for (const auto& k : a) EXPECT_EQ(k.hex().size(), 32u);
  EXPECT_NE(a[0], root_key(kFp));
  for (int changed = 0; changed < 16; ++changed) {
    auto t2 = t;
    t2[changed] += 1000;
    auto c = chain_keys(t2, B, kFp);
    const int blk = changed / B;
    for (int i = 0; i < 4; ++i) {
      if (i < blk) EXPECT_EQ(c[i], a[i]) << "token " << changed << " block " << i;
      else EXPECT_NE(c[i], a[i]) << "token " << changed << " block " << i;
    }
  }
  // Changing the tail (no full block) leaves every key alone but moves the state key.
  auto t3 = t;
  t3[17] = 999;
  EXPECT_EQ(chain_keys(t3, B, kFp), a);
  EXPECT_NE(state_key_for(t3, B, kFp), state_key_for(t, B, kFp));
  // Another model: every key differs.
  auto d = chain_keys(t, B, kFp ^ 1);
  for (int i = 0; i < 4; ++i) EXPECT_NE(d[i], a[i]);
  // A short block never collides with a full one; a state key at a block end is that block's key.
  EXPECT_EQ(state_key_for(std::span(t).first(8), B, kFp), a[1]);
  EXPECT_NE(state_key_for(std::span(t).first(9), B, kFp), a[2]);
  EXPECT_EQ(state_key_for({}, B, kFp), root_key(kFp));
  // The two halves are independent hashes.
  EXPECT_NE(a[0].a, a[0].b);
}

TEST(KvStoreChain, DocumentIdsAreContentAddressed) {
  auto t = iota_tokens(10);
  EXPECT_EQ(document_id(t, kFp), document_id(t, kFp));
  EXPECT_EQ(document_id(t, kFp).rfind("doc-", 0), 0u);
  EXPECT_EQ(document_id(t, kFp).size(), 36u);
  auto t2 = t;
  t2[9] = 0;
  EXPECT_NE(document_id(t2, kFp), document_id(t, kFp));
  EXPECT_NE(document_id(t, kFp + 1), document_id(t, kFp));
  EXPECT_NE(document_id(std::span(t).first(9), kFp), document_id(t, kFp));
}

TEST(KvStoreChain, DocumentRecordRoundTripAndValidation) {
  auto t = iota_tokens(11);
  DocumentRecord r;
  r.id = document_id(t, kFp);
  r.tokens = t;
  r.block_tokens = 4;
  r.block_keys = chain_keys(t, 4, kFp);
  r.state_key = state_key_for(t, 4, kFp);
  r.fingerprint = kFp;
  r.created_ms = 1700000000000;
  r.ttl_s = 3600;
  r.stored_bytes = 12345;
  const std::string json = document_to_json(r);
  auto back = document_from_json(json, kFp);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(back->tokens, r.tokens);
  EXPECT_EQ(back->block_keys, r.block_keys);
  EXPECT_EQ(back->state_key, r.state_key);
  EXPECT_EQ(back->ttl_s, 3600);
  EXPECT_EQ(back->stored_bytes, 12345);
  EXPECT_EQ(document_from_json(json, kFp + 1).status().code(), StatusCode::kFailedPrecondition);
  auto tampered = r;
  tampered.tokens[0] = 77;  // id and keys no longer match the tokens
  EXPECT_EQ(document_from_json(document_to_json(tampered), kFp).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(document_from_json("{\"id\": 3}", kFp).ok());
  EXPECT_FALSE(document_from_json("not json", kFp).ok());
  EXPECT_FALSE(document_from_json(json.substr(0, json.size() / 2), kFp).ok());
}

// Version 2 records carry the owner (an API key name, docs/design.md §9b), hashed into the id;
// version 1 records (no "version", no "owner") read as owner "".
TEST(KvStoreChain, DocumentRecordOwnerAndVersion1Records) {
  auto t = iota_tokens(9);
  EXPECT_EQ(document_id(t, kFp, ""), document_id(t, kFp));
  EXPECT_NE(document_id(t, kFp, "team-a"), document_id(t, kFp));
  EXPECT_NE(document_id(t, kFp, "team-a"), document_id(t, kFp, "team-b"));
  DocumentRecord r;
  r.owner = "team-a";
  r.id = document_id(t, kFp, r.owner);
  r.tokens = t;
  r.block_tokens = 4;
  r.block_keys = chain_keys(t, 4, kFp);
  r.state_key = state_key_for(t, 4, kFp);
  r.fingerprint = kFp;
  auto back = document_from_json(document_to_json(r), kFp);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->owner, "team-a");
  auto forged = r;
  forged.owner = "team-b";  // another owner under the same id
  EXPECT_EQ(document_from_json(document_to_json(forged), kFp).status().code(), StatusCode::kDataLoss);
  // A version 1 record, as written before owners existed.
  r.owner = "";
  r.id = document_id(t, kFp);
  auto v1 = Json::parse(document_to_json(r)).value();
  v1.mutable_object().erase("version");
  v1.mutable_object().erase("owner");
  auto old = document_from_json(v1.dump(), kFp);
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->owner, "");
  EXPECT_EQ(old->id, r.id);
}

// ---- memory backend -------------------------------------------------------------------------

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

// ---- dir backend ----------------------------------------------------------------------------

std::unique_ptr<DirStore> open_dir(const std::string& root, int64_t max_bytes = int64_t{1} << 30) {
  DirStoreOptions o;
  o.root = root;
  o.max_bytes = max_bytes;
  auto s = DirStore::open(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(KvStoreDir, RoundTripBinaryAndOddKeys) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  ASSERT_TRUE(d);
  const std::string bin = random_bytes(100000, 3) + std::string("\0\0", 2);
  for (const std::string& key : std::vector<std::string>{"kv:0123", "state:ab", "doc-ff", "with/slash", ".hidden",
                                                         "sp ace%", std::string(400, 'L')}) {
    ASSERT_TRUE(d->put(key, bin, 0s).ok()) << key;
    auto r = d->get(key);
    ASSERT_TRUE(r.ok() && r->has_value()) << key;
    EXPECT_EQ(**r, bin) << key;
    EXPECT_TRUE(std::filesystem::exists(d->path_for(key))) << key;
  }
  EXPECT_FALSE(d->get("absent")->has_value());
  ASSERT_TRUE(d->del("kv:0123").ok());
  EXPECT_FALSE(d->get("kv:0123")->has_value());
  ASSERT_TRUE(d->del("kv:0123").ok());
  // An empty value is a value.
  ASSERT_TRUE(d->put("empty", "", 0s).ok());
  auto e = d->get("empty");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_TRUE((*e)->empty());
  // Sets survive reopening (another process sees them).
  ASSERT_TRUE(d->set_add("docs:1", "doc-a").ok());
  ASSERT_TRUE(d->set_add("docs:1", "doc-b").ok());
  auto d2 = open_dir(tmp.sub("store"));
  EXPECT_EQ(ok_value(d2->set_members("docs:1")), (std::vector<std::string>{"doc-a", "doc-b"}));
  ASSERT_TRUE(d2->set_remove("docs:1", "doc-a").ok());
  EXPECT_EQ(ok_value(d->set_members("docs:1")), (std::vector<std::string>{"doc-b"}));
}

TEST(KvStoreDir, LruEvictionUnderByteBudget) {
  test::TempDir tmp;
  const std::string v(10000, 'v');
  const int64_t file = 32 + 1 + 4 + 10000;            // dir_store.h file layout, one-byte keys
  auto d = open_dir(tmp.sub("store"), file * 7 / 2);  // room for three and a half
  ASSERT_TRUE(d);
  for (const char* k : {"a", "b", "c"}) {
    ASSERT_TRUE(d->put(k, v, 0s).ok());
    std::this_thread::sleep_for(30ms);  // mtimes are coarse (a kernel tick)
  }
  ASSERT_TRUE(d->get("a")->has_value());  // touches a
  std::this_thread::sleep_for(30ms);
  ASSERT_TRUE(d->put("d", v, 0s).ok());  // over budget: the oldest (b) goes
  EXPECT_TRUE(d->get("a")->has_value());
  EXPECT_FALSE(d->get("b")->has_value());
  EXPECT_TRUE(d->get("c")->has_value());
  EXPECT_TRUE(d->get("d")->has_value());
  EXPECT_LE(d->scan_and_evict(), file * 7 / 2);
  EXPECT_EQ(d->put("huge", std::string(file * 4, 'h'), 0s).code(), StatusCode::kResourceExhausted);
}

TEST(KvStoreDir, TtlExpiry) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  ASSERT_TRUE(d->put("short", "v", 1s).ok());
  ASSERT_TRUE(d->put("long", "v", 0s).ok());
  EXPECT_TRUE(d->get("short")->has_value());
  std::this_thread::sleep_for(1100ms);
  EXPECT_FALSE(d->get("short")->has_value());
  EXPECT_FALSE(std::filesystem::exists(d->path_for("short")));  // expired files are removed
  EXPECT_TRUE(d->get("long")->has_value());
  EXPECT_EQ(d->stats().corrupt, 0u);
}

TEST(KvStoreDir, CorruptionIsAMissCountedAndDeleted) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  const std::string v = random_bytes(5000, 11);
  struct Damage {
    const char* name;
    std::function<void(std::string&)> edit;
  };
  std::vector<Damage> damages = {
      {"bit flip in the value", [](std::string& f) { f[f.size() - 100] ^= 0x04; }},
      {"bit flip in the header", [](std::string& f) { f[9] ^= 0x01; }},
      {"bit flip in the key", [](std::string& f) { f[33] ^= 0x01; }},
      {"truncated value", [](std::string& f) { f.resize(f.size() - 1); }},
      {"truncated header", [](std::string& f) { f.resize(20); }},
      {"empty file", [](std::string& f) { f.clear(); }},
      {"bad magic", [](std::string& f) { f[0] = 'X'; }},
      {"trailing bytes", [](std::string& f) { f += "junk"; }},
  };
  uint64_t expected_corrupt = 0;
  for (const auto& dmg : damages) {
    ASSERT_TRUE(d->put("victim", v, 0s).ok());
    const std::string path = d->path_for("victim");
    std::string f = test::read_file(path);
    dmg.edit(f);
    test::write_file(path, f);
    auto r = d->get("victim");
    ASSERT_TRUE(r.ok()) << dmg.name;
    EXPECT_FALSE(r->has_value()) << dmg.name;
    EXPECT_EQ(d->stats().corrupt, ++expected_corrupt) << dmg.name;
    EXPECT_FALSE(std::filesystem::exists(path)) << dmg.name;
  }
}

TEST(KvStoreDir, TwoProcessesWritingOneKeyNeverShowAPartialValue) {
  test::TempDir tmp;
  const std::string root = tmp.sub("store");
  auto reader = open_dir(root);
  ASSERT_TRUE(reader);
  const size_t n = 256 << 10;
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      DirStoreOptions o;
      o.root = root;
      auto s = DirStore::open(o);
      if (!s.ok()) _exit(2);
      for (int i = 0; i < 60; ++i) {
        // Every value is uniform: one writer's byte, so a mix or a partial file shows.
        std::string val(n, static_cast<char>('A' + w));
        val[0] = static_cast<char>(i);
        if (!(*s)->put("shared", val, 0s).ok()) _exit(3);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  int reads = 0, hits = 0, bad = 0;
  std::map<pid_t, int> exit_status;
  auto alive = [&] {
    bool any = false;
    for (pid_t p : kids) {
      if (exit_status.count(p)) continue;
      int status = 0;
      if (waitpid(p, &status, WNOHANG) == p) exit_status[p] = status;
      else any = true;
    }
    return any;
  };
  auto check = [&](const std::string& val) {
    if (val.size() != n) return false;
    const char c = val[1];
    if (c != 'A' && c != 'B') return false;
    return std::all_of(val.begin() + 1, val.end(), [c](char x) { return x == c; });
  };
  while (alive() || reads < 20) {
    auto r = reader->get("shared");
    ++reads;
    if (!r.ok()) ++bad;
    else if (r->has_value()) {
      ++hits;
      if (!check(**r)) ++bad;
    }
    if (reads > 100000) break;
  }
  for (pid_t p : kids) {
    if (!exit_status.count(p)) waitpid(p, &exit_status[p], 0);
    const int status = exit_status[p];
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(reader->stats().corrupt, 0u);
  auto last = reader->get("shared");
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_TRUE(check(**last));
  // No temp files left behind.
  for (auto& e : std::filesystem::recursive_directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  std::cout << "[ info ] " << reads << " reads, " << hits << " hits during the writes\n";
}

TEST(KvStoreDir, ConcurrentEvictorsTolerateVanishingFiles) {
  test::TempDir tmp;
  const std::string root = tmp.sub("store");
  const int64_t budget = 400 << 10;
  auto a = open_dir(root, budget), b = open_dir(root, budget);
  std::atomic<int> errors{0};
  auto work = [&](DirStore* s, int id) {
    for (int i = 0; i < 150; ++i) {
      if (!s->put(key_name({id, i}), std::string(8000, 'x'), 0s).ok()) ++errors;
      auto r = s->get(key_name({1 - id, i / 2}));
      if (!r.ok()) ++errors;
    }
  };
  std::thread t1(work, a.get(), 0), t2(work, b.get(), 1);
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(a->scan_and_evict(), budget);
  EXPECT_EQ(a->stats().corrupt + b->stats().corrupt, 0u);
}

// ---- tiered ---------------------------------------------------------------------------------

// A backend that fails, stalls or lies on demand.
class FakeStore final : public KvStore {
 public:
  std::atomic<bool> fail{false};
  std::atomic<bool> lie{false};  // returns other bytes than were put
  std::atomic<int> delay_ms{0};
  std::atomic<int> calls{0};

  KvGetResult get(std::string_view key) override {
    if (auto st = enter(); !st.ok()) return st;
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(std::string(key));
    if (it == data_.end()) return kv_miss();
    return KvValue(lie ? it->second + "!" : it->second);
  }
  Status put(std::string_view key, std::string_view value, std::chrono::seconds) override {
    YOCO_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> l(mu_);
    data_[std::string(key)] = std::string(value);
    return Status::Ok();
  }
  Status del(std::string_view key) override {
    YOCO_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> l(mu_);
    data_.erase(std::string(key));
    return Status::Ok();
  }
  Status set_add(std::string_view, std::string_view) override { return enter(); }
  Status set_remove(std::string_view, std::string_view) override { return enter(); }
  Result<std::vector<std::string>> set_members(std::string_view) override {
    YOCO_RETURN_IF_ERROR(enter());
    return std::vector<std::string>{};
  }
  std::string name() const override { return "fake"; }
  size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return data_.size();
  }

 private:
  Status enter() {
    ++calls;
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    if (fail) return kv_unavailable("fake store down");
    return Status::Ok();
  }
  std::mutex mu_;
  std::map<std::string, std::string> data_;
};

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

// ---- circuit breaker ------------------------------------------------------------------------

CircuitBreakerOptions fast_breaker() {
  CircuitBreakerOptions o;
  o.failure_threshold = 3;
  o.slow_call = 150ms;
  o.cooldown = 200ms;
  o.max_cooldown = 1000ms;
  return o;
}

TEST(KvStoreBreaker, OpensOnFailuresDropsCallsAndRecoversThroughTheProbe) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreaker b(std::move(fake), fast_breaker());
  ASSERT_TRUE(b.put("k", "v", 0s).ok());
  EXPECT_TRUE(b.get("k")->has_value());
  f->fail = true;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(b.get("k").ok());
  EXPECT_TRUE(b.is_open());
  const int calls = f->calls;
  auto r = b.get("k");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());                                     // a miss, at once
  EXPECT_EQ(b.put("k", "v", 0s).code(), StatusCode::kUnavailable);  // dropped
  EXPECT_EQ(f->calls, calls);                                       // the backend was not touched
  auto s = b.stats();
  EXPECT_EQ(s.breaker_trips, 1u);
  EXPECT_EQ(s.breaker_open, 1u);
  EXPECT_EQ(s.dropped, 2u);
  // Cool-down passes while the backend is still down: the probe fails, it stays open.
  std::this_thread::sleep_for(250ms);
  EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_TRUE(b.is_open());
  // Healed: after the (doubled) cool-down the probe's write-then-read closes it.
  f->fail = false;
  std::this_thread::sleep_for(450ms);
  auto h = b.get("k");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->has_value());
  EXPECT_FALSE(b.is_open());
  EXPECT_EQ(b.stats().breaker_open, 0u);
  EXPECT_EQ(f->size(), 1u);  // the probe cleaned up after itself
}

TEST(KvStoreBreaker, SlowCallOpensAndALyingBackendStaysOpen) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreaker b(std::move(fake), fast_breaker());
  f->delay_ms = 200;
  EXPECT_TRUE(b.get("k").ok());  // slow but fine: still trips
  EXPECT_TRUE(b.is_open());
  f->delay_ms = 0;
  const int calls = f->calls;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_EQ(f->calls, calls);  // none reached the backend
  // The backend answers, but with other bytes than the probe wrote: not closed.
  f->lie = true;
  std::this_thread::sleep_for(250ms);
  EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_TRUE(b.is_open());
  f->lie = false;
  std::this_thread::sleep_for(450ms);
  (void)b.get("k");
  EXPECT_FALSE(b.is_open());
}

TEST(KvStoreBreaker, ConcurrentCallersNeverWaitWhileOpen) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreakerOptions o = fast_breaker();
  o.cooldown = 5000ms;
  CircuitBreaker b(std::move(fake), o);
  f->fail = true;
  for (int i = 0; i < 3; ++i) (void)b.get("k");
  ASSERT_TRUE(b.is_open());
  f->delay_ms = 1000;  // were any call to reach it, it would take a second
  std::vector<std::thread> th;
  std::atomic<double> worst{0};
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const auto t0 = Clock::now();
        (void)b.get("k");
        (void)b.put("k", "v", 0s);
        double ms = ms_since(t0), w = worst.load();
        while (ms > w && !worst.compare_exchange_weak(w, ms)) {
        }
      }
    });
  for (auto& x : th) x.join();
  EXPECT_LT(worst.load(), 250.0);  // a call reaching the backend would take 1000 ms
}

// ---- factory and URL parsing ----------------------------------------------------------------

TEST(KvStoreFactory, ParsesSpecsAndNamesTheBadPart) {
  test::TempDir tmp;
  auto m = make_kv_store("memory:1MiB");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->name(), "memory");
  auto t = make_kv_store("memory:64MiB, dir://" + tmp.sub("d") + "?max_bytes=10MiB&fsync=1");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->name(), "tiered(memory,dir:" + tmp.sub("d") + ")");
  ASSERT_TRUE((*t)->put("x", "y", 0s).ok());
  EXPECT_TRUE(std::filesystem::exists(tmp.sub("d")));
  auto err = [](const std::string& spec) {
    auto r = make_kv_store(spec);
    EXPECT_FALSE(r.ok()) << spec;
    return r.ok() ? std::string() : r.status().to_string();
  };
  EXPECT_NE(err("bogus").find("tier 1 'bogus'"), std::string::npos);
  EXPECT_NE(err("memory,ftp://x").find("tier 2"), std::string::npos);
  EXPECT_NE(err("memory:12XB").find("unit"), std::string::npos);
  EXPECT_NE(err("dir:" + tmp.sub("e") + "?colour=red").find("colour"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:99999").find("port"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6379?pool=0").find("pool"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6379?what=1").find("what"), std::string::npos);
  EXPECT_NE(err("memory,,memory").find("empty"), std::string::npos);
  // A password never appears in an error.
  const std::string e = err("redis://user:hunter2@127.0.0.1:6379?bogus=1");
  EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
  // TLS: files are read when the store is made, and a bad one is named.
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_ca=" + tmp.sub("none.pem")).find("tls_ca"), std::string::npos);
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_cert=" + tmp.sub("c.pem")).find("tls_key"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6380?tls_verify=0").find("without tls"), std::string::npos);
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_ca=").find("tls_ca"), std::string::npos);
  // Without a server nothing connects yet: making a TLS store succeeds (system trust store).
  auto lazy = make_kv_store("rediss://127.0.0.1:6380?breaker=0");
  ASSERT_TRUE(lazy.ok()) << lazy.status().to_string();
  EXPECT_EQ((*lazy)->name(), "rediss://127.0.0.1:6380/0");
}

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

TEST(KvStoreFactory, ByteSizes) {
  EXPECT_EQ(ok_value(kv::parse_byte_size("256MiB")), int64_t{256} << 20);
  EXPECT_EQ(ok_value(kv::parse_byte_size("10GiB")), int64_t{10} << 30);
  EXPECT_EQ(ok_value(kv::parse_byte_size("1GB")), 1000000000);
  EXPECT_EQ(ok_value(kv::parse_byte_size("1.5KiB")), 1536);
  EXPECT_EQ(ok_value(kv::parse_byte_size("4096")), 4096);
  EXPECT_EQ(ok_value(kv::parse_byte_size("2g")), int64_t{2} << 30);
  EXPECT_FALSE(kv::parse_byte_size("").ok());
  EXPECT_FALSE(kv::parse_byte_size("MiB").ok());
  EXPECT_FALSE(kv::parse_byte_size("1..2").ok());
  EXPECT_FALSE(kv::parse_byte_size("99999999999TiB").ok());
}

// ---- cache helper ---------------------------------------------------------------------------

ModelConfig tiny_config(int window) {
  ModelConfig c;
  c.dim = 16;
  c.n_layers = 2;
  c.hidden_dim = 32;
  c.n_self_heads = 2;
  c.n_attn_heads = 2;
  c.n_attn_kv_heads = 1;
  c.vocab_size = 64;
  c.n_self_layers = 1;
  c.sliding_window = window;
  c.max_seq_len = 4096;
  return c;
}

SequenceState random_state(const ModelConfig& c, int64_t n, uint32_t seed) {
  SequenceState st = make_sequence_state(c);
  st.position = n;
  st.k = random_floats(static_cast<size_t>(n) * c.kv_dim(), seed);
  st.v = random_floats(st.k.size(), seed + 1);
  for (auto& s : st.self) {
    if (c.is_swa()) {
      s.k = random_floats(s.k.size(), seed + 2);
      s.v = random_floats(s.v.size(), seed + 3);
      s.count = static_cast<int>(std::min<int64_t>(n, s.capacity));
      s.head = static_cast<int>((n - s.count) % s.capacity);
    } else {
      s.s = random_floats(s.s.size(), seed + 4);
    }
  }
  st.last_hidden = random_floats(c.dim, seed + 5);
  return st;
}

KvCacheOptions cache_options(const ModelConfig& c, int B, KvDType dtype = KvDType::kF32) {
  KvCacheOptions o;
  o.fingerprint = kFp;
  o.kv_dim = c.kv_dim();
  o.block_tokens = B;
  o.dtype = dtype;
  o.lookup_batch = 3;  // several batches in every walk
  return o;
}

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

// ---- redis (integration;redis) --------------------------------------------------------------

std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool port_accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A redis-server on 127.0.0.1 owned by the test: killed by the destructor, also on failure.
// With a PKI, it listens only on a TLS port and requires a client certificate signed by the CA.
class RedisServer {
 public:
  RedisServer(int port, std::string password, const test::TestPki* tls = nullptr, std::vector<std::string> extra = {})
      : port_(port), password_(std::move(password)), tls_(tls), extra_(std::move(extra)) {}
  ~RedisServer() { stop(); }

  bool start() {
    const std::string bin = find_program("redis-server");
    if (bin.empty()) return false;
    pid_ = fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<std::string> args{bin,  "--bind",      "127.0.0.1", "--save",           "",  "--appendonly",
                                    "no", "--daemonize", "no",        "--protected-mode", "no"};
      const std::vector<std::string> listen =
          tls_ ? tls_->redis_server_args(port_) : std::vector<std::string>{"--port", std::to_string(port_)};
      args.insert(args.end(), listen.begin(), listen.end());
      args.insert(args.end(), extra_.begin(), extra_.end());
      if (!password_.empty()) {
        args.push_back("--requirepass");
        args.push_back(password_);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      _exit(127);
    }
    for (int i = 0; i < 250; ++i) {
      if (port_accepts(port_)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  int port() const { return port_; }
  bool running() const { return pid_ > 0; }

  // redis-cli's --raw output of one command (tests poke at chunks with it); cluster: -c follows
  // redirections.
  std::string cli(const std::string& command, bool cluster = false) const {
    std::string cmd =
        "redis-cli " + std::string(cluster ? "-c " : "") + "-h 127.0.0.1 -p " + std::to_string(port_) +
        (password_.empty() ? "" : " -a " + password_ + " --no-auth-warning") +
        (tls_ ? " --tls --cacert " + tls_->ca + " --cert " + tls_->client_cert + " --key " + tls_->client_key : "") +
        " --raw " + command + " 2>&1";
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
      ::pclose(f);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  }

 private:
  int port_;
  std::string password_;
  const test::TestPki* tls_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

// A Redis Cluster of Debian's redis-server on 127.0.0.1 owned by the test: 3 masters and 3
// replicas (redis-cli --cluster create), client and bus ports chosen at run time, every node
// killed by the destructor, also on failure. A short node timeout keeps fail-over quick; full
// coverage is not required, so the healthy masters serve while one is down (as a cache should).
class RedisCluster {
 public:
  static constexpr int kNodes = 6;
  // With a PKI the nodes speak only TLS, to clients and on the cluster bus.
  explicit RedisCluster(const test::TestPki* tls = nullptr, int node_timeout_ms = 1000)
      : tls_(tls), node_timeout_ms_(node_timeout_ms) {}
  ~RedisCluster() { stop(); }

  bool start() {
    std::string create = "redis-cli" + tls_flags() + " --cluster create";
    for (int i = 0; i < kNodes; ++i) {
      const int port = free_port();
      int bus = free_port();
      while (bus == port) bus = free_port();
      std::vector<std::string> args{"--cluster-enabled",
                                    "yes",
                                    "--cluster-config-file",
                                    dir_.path() + "/nodes-" + std::to_string(port) + ".conf",
                                    "--cluster-node-timeout",
                                    std::to_string(node_timeout_ms_),
                                    "--cluster-port",
                                    std::to_string(bus),
                                    "--cluster-require-full-coverage",
                                    "no",
                                    "--repl-diskless-sync-delay",  // replicas sync at once, not after 5 s
                                    "0",
                                    "--dir",
                                    dir_.path()};
      if (tls_) args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
      nodes_.push_back(std::make_unique<RedisServer>(port, "", tls_, std::move(args)));
      if (!nodes_.back()->start()) return false;
      create += " 127.0.0.1:" + std::to_string(port);
    }
    run(create + " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1");
    return wait_ok(std::chrono::seconds(20));
  }
  void stop() {
    for (auto& n : nodes_) n->stop();
  }
  // Until every running node says cluster_state:ok and agrees on 3 masters covering all slots.
  bool wait_ok(std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      bool ok = true;
      for (auto& n : nodes_)
        if (n->running() && n->cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos) ok = false;
      if (ok && masters().size() == 3) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  RedisServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  RedisServer* by_port(int port) {
    for (auto& n : nodes_)
      if (n->port() == port) return n.get();
    return nullptr;
  }
  // A running node, for commands that any node answers.
  RedisServer& any() {
    for (auto& n : nodes_)
      if (n->running()) return *n;
    return *nodes_[0];
  }
  std::string cli(const std::string& command) { return any().cli(command, true); }

  struct NodeInfo {
    std::string id;
    int port = 0;
    bool master = false;
    bool failed = false;
    std::string master_id;
    int slots = 0;
    std::vector<std::pair<int, int>> ranges;
  };
  // CLUSTER NODES as one running node sees it.
  std::vector<NodeInfo> nodes() {
    std::vector<NodeInfo> out;
    std::istringstream in(any().cli("CLUSTER NODES"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::vector<std::string> w;
      for (std::string x; f >> x;) w.push_back(x);
      if (w.size() < 8) continue;
      NodeInfo n;
      n.id = w[0];
      n.port = std::atoi(w[1].substr(w[1].rfind(':') + 1).c_str());
      n.master = w[2].find("master") != std::string::npos;
      n.failed = w[2].find("fail") != std::string::npos;
      n.master_id = w[3];
      for (size_t i = 8; i < w.size(); ++i) {
        if (w[i].front() == '[') continue;  // a slot being migrated
        const size_t dash = w[i].find('-');
        const int lo = std::atoi(w[i].c_str()),
                  hi = dash == std::string::npos ? lo : std::atoi(w[i].c_str() + dash + 1);
        n.ranges.emplace_back(lo, hi);
        n.slots += hi - lo + 1;
      }
      out.push_back(n);
    }
    return out;
  }
  // Ports of the healthy masters that serve slots.
  std::vector<int> masters() {
    std::vector<int> out;
    for (const auto& n : nodes())
      if (n.master && !n.failed && n.slots > 0) out.push_back(n.port);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The port of the master serving a key's slot (CLUSTER KEYSLOT, CLUSTER NODES).
  int master_of(const std::string& key) {
    const int slot = std::atoi(cli("CLUSTER KEYSLOT '" + key + "'").c_str());
    for (const auto& n : nodes())
      if (n.master && !n.failed)
        for (const auto& [lo, hi] : n.ranges)
          if (slot >= lo && slot <= hi) return n.port;
    return 0;
  }
  // A node's id (CLUSTER MYID).
  std::string id_of(int port) { return by_port(port)->cli("CLUSTER MYID"); }
  // Until each master's replicas hold as many keys as it does.
  bool wait_replicated(std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      bool ok = true;
      const auto all = nodes();
      for (const auto& m : all) {
        if (!m.master || m.failed || m.slots == 0) continue;
        const std::string keys = by_port(m.port)->cli("DBSIZE");
        for (const auto& r : all)
          if (r.master_id == m.id && !r.failed && by_port(r.port)->cli("DBSIZE") != keys) ok = false;
      }
      if (ok) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  // Every key matching a pattern, over all nodes (replicas repeat their masters' keys).
  std::vector<std::string> keys(const std::string& pattern) {
    std::set<std::string> all;
    for (auto& n : nodes_) {
      if (!n->running()) continue;
      std::istringstream in(n->cli("KEYS '" + pattern + "'"));
      for (std::string k; std::getline(in, k);)
        if (!k.empty()) all.insert(k);
    }
    return {all.begin(), all.end()};
  }
  std::string seeds() const {
    std::string s;
    for (size_t i = 0; i < 3; ++i) s += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes_[i]->port());
    return s;
  }
  // redis-cli's TLS options for these nodes ("" without TLS).
  std::string tls_flags() const {
    return tls_ ? " --tls --cacert " + tls_->ca + " --cert " + tls_->client_cert + " --key " + tls_->client_key : "";
  }
  static std::string run(const std::string& cmd) {
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
      ::pclose(f);
    }
    return out;
  }

 private:
  const test::TestPki* tls_;
  int node_timeout_ms_;
  test::TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

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
    o.command_timeout = 200ms;
    o.connect_timeout = 200ms;
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
    ASSERT_TRUE(s->put(keys.back(), vals[keys.back()], 0s).ok());
  }
  auto got = s->get_many(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << keys[i];
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

// Redis Cluster's CRC16 and hash tags against the values Redis documents (no server needed).
TEST(KvStoreClusterSlot, Crc16AndHashTags) {
  EXPECT_EQ(redis::crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(redis::key_slot("foo"), 12182);
  EXPECT_EQ(redis::key_slot("{user1000}.following"), redis::key_slot("{user1000}.followers"));
  EXPECT_EQ(redis::key_slot("foo{}{bar}"), redis::crc16_xmodem("foo{}{bar}") % 16384);  // an empty tag: the whole key
  EXPECT_EQ(redis::key_slot("foo{{bar}}zap"), redis::key_slot("{bar"));
  EXPECT_EQ(redis::key_slot("foo{bar}{zap}"), redis::key_slot("bar"));
  EXPECT_EQ(redis::key_slot("yoco:{k}"), redis::key_slot("yoco:{k}:0123456789abcdef:7"));
}

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
  EXPECT_LT(ms_since(t0), 2 * 200 + 300);
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
  EXPECT_LT(ms_since(t0), 2 * 200 + 300) << st.to_string();
  RedisServer plain_server(free_port(), "");
  ASSERT_TRUE(plain_server.start());
  RedisOptions tls_to_plain = options();
  tls_to_plain.port = plain_server.port();
  t0 = Clock::now();
  st = get_status(direct(tls_to_plain));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tls handshake"), std::string::npos) << st.to_string();
  EXPECT_LT(ms_since(t0), 2 * 200 + 300) << st.to_string();
}

}  // namespace
}  // namespace yoco
