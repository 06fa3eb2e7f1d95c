// The hand-off format target on its own (handoff/, label unit): it links yoco_handoff and
// nothing of the engine. The byte codec, the one bf16 rounding, the state blob's writer and
// checks, and the prefix hash chain with pinned keys (stores keep them across versions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "handoff/block_pool.h"
#include "handoff/bytes.h"
#include "handoff/kv_rows.h"
#include "handoff/prefix_chain.h"
#include "handoff/state_blob.h"

namespace yoco {
namespace {

constexpr uint64_t kFp = 0x1234abcd5678ef01ull;

TEST(HandoffBytes, LittleEndianAndBoundsChecked) {
  ByteWriter w;
  w.put<uint16_t>(0x0102);
  w.put<int32_t>(-2);
  w.put<uint64_t>(0x0102030405060708ull);
  w.put_string("ab");
  const std::vector<uint8_t> want = {0x02, 0x01, 0xfe, 0xff, 0xff, 0xff, 8, 7, 6, 5, 4, 3, 2, 1, 2, 0, 0, 0, 'a', 'b'};
  EXPECT_EQ(w.bytes(), want);
  ByteReader r(w.bytes());
  uint16_t a = 0;
  int32_t b = 0;
  uint64_t c = 0;
  std::string s;
  ASSERT_TRUE(r.get(a) && r.get(b) && r.get(c) && r.get_string(s, 16));
  EXPECT_EQ(a, 0x0102);
  EXPECT_EQ(b, -2);
  EXPECT_EQ(c, 0x0102030405060708ull);
  EXPECT_EQ(s, "ab");
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_FALSE(r.get(a));  // past the end: refused, nothing read
  ByteReader short_string(std::span(w.bytes()).subspan(14, 5));
  EXPECT_FALSE(short_string.get_string(s, 16));
  uint8_t buf[4];
  store_le<uint32_t>(buf, 0xa1b2c3d4u);
  EXPECT_EQ(buf[0], 0xd4);
  EXPECT_EQ(load_le<uint32_t>(buf), 0xa1b2c3d4u);
}

TEST(HandoffBf16, RoundsToNearestEvenAndWidensExactly) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));               // a tie: to even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // a tie: up to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(3.4e38f))));
  const std::vector<float> v = {0.1f, -2.75f, 1e-20f, 65504.0f};
  for (KvDType d : {KvDType::kF32, KvDType::kBF16}) {
    std::vector<uint8_t> bytes(v.size() * kv_dtype_bytes(d));
    encode_kv_values(v.data(), static_cast<int64_t>(v.size()), d, bytes.data());
    std::vector<float> back(v.size());
    decode_kv_values(bytes.data(), static_cast<int64_t>(v.size()), d, back.data());
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(back[i], d == KvDType::kF32 ? v[i] : bf16_to_f32(f32_to_bf16(v[i]))) << kv_dtype_name(d) << " " << i;
  }
}

StateShape shape(SelfMixer mixer) {
  StateShape s;
  s.kv_dim = 4;
  s.dim = 6;
  s.n_loops = 2;
  s.n_self_layers = 1;
  s.mixer = mixer;
  s.n_self_heads = 2;
  s.self_head_dim = 3;
  s.window = 4;
  return s;
}

// A blob with rows [begin, begin + rows) and seed-dependent values everywhere.
std::vector<uint8_t> make_blob(SelfMixer mixer, int64_t position, int64_t begin, int64_t rows, KvDType dtype,
                               int window_rows = -1) {
  StateBlobHeader h;
  h.fingerprint = kFp;
  h.position = position;
  h.kv_row_begin = begin;
  h.kv_rows = rows;
  h.kv_dtype = dtype;
  h.shape = shape(mixer);
  h.has_last_hidden = position > 0;
  std::vector<float> vals(64);
  std::iota(vals.begin(), vals.end(), 0.5f);
  StateBlobWriter w(h);
  for (int64_t r = 0; r < 2 * rows; ++r) w.put_kv_row(vals.data() + r % 8);
  for (int64_t l = 0; l < h.shape.self_layers(); ++l) {
    if (mixer == SelfMixer::kGatedRetention) {
      w.put_retention(vals.data() + l);
      continue;
    }
    const auto n = static_cast<uint32_t>(window_rows >= 0 ? window_rows : h.shape.window_rows(position));
    w.put_window_rows(n);
    for (uint32_t i = 0; i < 2 * n; ++i) w.put_window_row(vals.data() + i);
  }
  if (h.has_last_hidden) w.put_last_hidden(vals.data() + 3);
  return w.finish();
}

TEST(HandoffStateBlob, ParsesWhatWasWritten) {
  for (SelfMixer mixer : {SelfMixer::kGatedRetention, SelfMixer::kSlidingWindow}) {
    const auto blob = make_blob(mixer, 9, 8, 1, KvDType::kBF16);
    auto v = parse_state_blob(blob);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(v->header.fingerprint, kFp);
    EXPECT_EQ(v->header.position, 9);
    EXPECT_EQ(v->header.kv_row_begin, 8);
    EXPECT_EQ(v->header.kv_rows, 1);
    EXPECT_EQ(v->header.kv_dtype, KvDType::kBF16);
    EXPECT_EQ(v->header.shape, shape(mixer));
    EXPECT_EQ(v->k_rows.size(), 4u * 2);
    ASSERT_EQ(v->self.size(), 2u);
    if (mixer == SelfMixer::kGatedRetention) {
      EXPECT_EQ(v->self[1].retention.size(), 2u * 3 * 3 * 4);
      std::vector<float> s(18);
      read_f32(v->self[1].retention, s.data());
      EXPECT_EQ(s[0], 1.5f);
    } else {
      EXPECT_EQ(v->self[0].window_rows, 3u);  // min(position, W − 1)
      EXPECT_EQ(v->self[0].window_k.size(), 3u * 6 * 4);
    }
    EXPECT_EQ(v->last_hidden.size(), 6u * 4);
    EXPECT_TRUE(check_state_blob_model(v->header, kFp, shape(mixer)).ok());
  }
}

TEST(HandoffStateBlob, EveryFlipAndTruncationIsDataLoss) {
  const auto blob = make_blob(SelfMixer::kSlidingWindow, 5, 0, 5, KvDType::kF32);
  for (size_t i = 0; i < blob.size(); ++i) {
    auto bad = blob;
    bad[i] ^= 0x01;
    EXPECT_EQ(parse_state_blob(bad).status().code(), StatusCode::kDataLoss) << "byte " << i;
  }
  for (size_t n = 0; n < blob.size(); n += 7)
    EXPECT_EQ(parse_state_blob(std::span(blob).first(n)).status().code(), StatusCode::kDataLoss) << n << " bytes";
}

TEST(HandoffStateBlob, StructureAndModelChecksNameTheField) {
  // A window with the wrong row count (checksummed, so only the structure check catches it).
  auto v = parse_state_blob(make_blob(SelfMixer::kSlidingWindow, 5, 0, 0, KvDType::kF32, 1));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(v.status().message().find("window state has 1 rows, expected 3"), std::string::npos)
      << v.status().message();
  // Another model: FAILED_PRECONDITION naming what differs.
  auto ok = parse_state_blob(make_blob(SelfMixer::kGatedRetention, 5, 0, 0, KvDType::kF32));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(check_state_blob_model(ok->header, kFp ^ 1, shape(SelfMixer::kGatedRetention)).code(),
            StatusCode::kFailedPrecondition);
  StateShape other = shape(SelfMixer::kGatedRetention);
  other.n_loops = 3;
  Status st = check_state_blob_model(ok->header, kFp, other);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("n_loops is 2, model has 3"), std::string::npos) << st.message();
  EXPECT_FALSE(check_state_blob_model(ok->header, kFp, shape(SelfMixer::kSlidingWindow)).ok());
}

TEST(HandoffPrefixChain, KeysArePinnedAndPrefixesChain) {
  // Stores keep these keys: the chain must never change for the same input.
  EXPECT_EQ(root_key(kFp).hex(), "f9644a6f26a8c13645eb6e8207992feb");
  const std::vector<int32_t> t = {0, 1, 2, 3, 4, 5};
  const auto keys = chain_keys(t, 4, kFp);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].hex(), "6936ba9d4570f17225626a3a889b44f7");
  EXPECT_EQ(prefix_key(t, 4, kFp).hex(), "3c76760b5412a2d35e12e5e3ee6075ad");
  EXPECT_EQ(prefix_key(std::span(t).first(4), 4, kFp), keys[0]);
  EXPECT_EQ(prefix_key({}, 4, kFp), root_key(kFp));
  EXPECT_EQ(keys[0].fold64(), keys[0].a ^ keys[0].b);
  EXPECT_NE(chain_keys(t, 4, kFp ^ 1)[0], keys[0]);
}

// A pool of two 2-row blocks, to check the interface's row arithmetic.
class TwoBlockPool final : public KvBlockPool {
 public:
  int block_size() const override { return 2; }
  int row_floats() const override { return 3; }
  int total_blocks() const override { return 2; }
  float* k_base() override { return k_; }
  float* v_base() override { return v_; }
  Result<std::vector<int32_t>> allocate_blocks(int64_t rows) override { return std::vector<int32_t>{1, 0}; }
  void release_blocks(std::span<const int32_t>) override {}

 private:
  float k_[12] = {}, v_[12] = {};
};

TEST(HandoffBlockPool, RowOffsetsFollowTheBlockTable) {
  TwoBlockPool pool;
  const std::vector<int32_t> blocks = {1, 0};
  EXPECT_EQ(pool.row_offset(blocks, 0), 6);  // block 1, row 0
  EXPECT_EQ(pool.row_offset(blocks, 1), 9);
  EXPECT_EQ(pool.row_offset(blocks, 2), 0);  // block 0, row 0
  EXPECT_EQ(pool.row_offset(blocks, 3), 3);
  EXPECT_EQ(pool.bytes(), 2 * 12 * 4);
}

}  // namespace
}  // namespace yoco
