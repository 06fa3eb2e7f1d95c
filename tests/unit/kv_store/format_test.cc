// kv_store/format.h: the checked object format (every header field, every bit flip), the prefix
// hash chain's store keys, document ids and records (docs/design.md §5).
#include "kv_store/format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/checksum.h"
#include "common/json.h"
#include "model/safetensors.h"
#include "tests/unit/kv_store/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

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

}  // namespace
}  // namespace yoco
