// Deterministic K/V rows and state blobs shared by transfer_test and its peer process, so each
// side can rebuild what the other sent and compare bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "model/config.h"
#include "model/kv_pool.h"
#include "model/state.h"
#include "transfer/ucx_transport.h"

namespace yoco::test {

inline float kv_value(uint64_t seed, int which, int64_t row, int col) {
  const uint64_t h = mix64(mix64(seed, static_cast<uint64_t>(which) * 0x10000000ull + row), static_cast<uint64_t>(col));
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1e-6f;
}

// Rows [begin, begin + n) of K (which = 0) or V (which = 1), [n, kv_dim] row-major.
inline std::vector<float> kv_rows(uint64_t seed, int which, int64_t begin, int64_t n, int kv_dim) {
  std::vector<float> out(static_cast<size_t>(n) * kv_dim);
  for (int64_t r = 0; r < n; ++r)
    for (int c = 0; c < kv_dim; ++c) out[r * kv_dim + c] = kv_value(seed, which, begin + r, c);
  return out;
}

// A self-decoder state after `position` tokens, filled with seed-dependent values.
inline SequenceState test_state(const ModelConfig& c, uint64_t seed, int64_t position) {
  SequenceState st = make_sequence_state(c);
  st.position = position;
  uint64_t h = seed;
  auto next = [&] {
    h = mix64(h, 1);
    return static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) * 1e-3f;
  };
  for (auto& s : st.self) {
    for (auto& x : s.s) x = next();
    if (s.capacity > 0) {
      const int rows = static_cast<int>(std::min<int64_t>(position, s.capacity - 1));
      for (int i = 0; i < rows; ++i) {
        std::vector<float> k(c.dim), v(c.dim);
        for (int j = 0; j < c.dim; ++j) {
          k[j] = next();
          v[j] = next();
        }
        s.ring_push(k.data(), v.data(), c.dim);
      }
    }
  }
  st.last_hidden.resize(c.dim);
  for (auto& x : st.last_hidden) x = next();
  return st;
}

inline std::vector<uint8_t> test_state_blob(const ModelConfig& c, uint64_t fingerprint, uint64_t seed,
                                            int64_t position) {
  StateBlobOptions opt;
  opt.include_kv = false;
  return serialize_state(test_state(c, seed, position), c, fingerprint, opt);
}

// A receiver for model `c`, given the plain numbers a decode worker passes (decode_service/main.cc).
inline Result<std::unique_ptr<KvReceiver>> make_receiver(KvPool& pool, const ModelConfig& c, uint64_t fingerprint,
                                                         UcxReceiverOptions ro) {
  ro.fingerprint = fingerprint;
  ro.state_shape = state_shape(c);
  ro.max_rows = c.max_seq_len;
  return make_ucx_receiver(pool, ro);
}

// The decode side's admission: the committed blob restored over the committed blocks (whose
// hold moves into the state's pages).
inline SequenceState admitted_state(const CommittedSequence& c, const ModelConfig& cfg, uint64_t fingerprint,
                                    KvPool& pool) {
  SequenceState st;
  YOCO_CHECK(deserialize_state(c.state_blob, cfg, fingerprint, st).ok());
  st.pages = pool.new_pages(c.blocks);
  return st;
}

inline std::string to_hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(d[x >> 4]);
    s.push_back(d[x & 15]);
  }
  return s;
}

inline std::vector<uint8_t> from_hex(const std::string& s) {
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::vector<uint8_t> b(s.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(v(s[2 * i]) * 16 + v(s[2 * i + 1]));
  return b;
}

}  // namespace yoco::test
