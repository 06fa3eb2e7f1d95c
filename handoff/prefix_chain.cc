#include "handoff/prefix_chain.h"

#include <string_view>

#include "common/checksum.h"
#include "common/status.h"
#include "handoff/bytes.h"

namespace yoco {

std::string BlockKey::hex() const { return hex64(a) + hex64(b); }

BlockKey hash128(std::span<const uint8_t> bytes) {
  BlockKey k;
  k.a = fnv1a64(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  uint64_t h = 0x6a09e667f3bcc909ull ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) h = mix64(h, load_le<uint64_t>(bytes.data() + i));
  uint64_t tail = 0;
  for (size_t j = 0; i + j < bytes.size(); ++j) tail |= static_cast<uint64_t>(bytes[i + j]) << (8 * j);
  h = mix64(h, tail);
  k.b = mix64(h, bytes.size());
  return k;
}

BlockKey root_key(uint64_t fingerprint) {
  ByteWriter w;
  w.put_raw("yoco-kv-root", 12);
  w.put<uint64_t>(fingerprint);
  return hash128(w.bytes());
}

BlockKey block_key(const BlockKey& prev, std::span<const int32_t> block_tokens, uint64_t fingerprint) {
  ByteWriter w(28 + 4 * block_tokens.size());
  w.put<uint64_t>(prev.a);
  w.put<uint64_t>(prev.b);
  w.put<uint64_t>(fingerprint);
  w.put<uint32_t>(static_cast<uint32_t>(block_tokens.size()));
  for (int32_t t : block_tokens) w.put<uint32_t>(static_cast<uint32_t>(t));
  return hash128(w.bytes());
}

std::vector<BlockKey> chain_keys(std::span<const int32_t> tokens, int block_tokens, uint64_t fingerprint) {
  YOCO_CHECK(block_tokens > 0);
  std::vector<BlockKey> keys;
  const size_t n = tokens.size() / static_cast<size_t>(block_tokens);
  keys.reserve(n);
  BlockKey prev = root_key(fingerprint);
  for (size_t i = 0; i < n; ++i) {
    prev = block_key(prev, tokens.subspan(i * block_tokens, block_tokens), fingerprint);
    keys.push_back(prev);
  }
  return keys;
}

BlockKey prefix_key(std::span<const int32_t> tokens, int block_tokens, uint64_t fingerprint) {
  auto keys = chain_keys(tokens, block_tokens, fingerprint);
  const BlockKey last = keys.empty() ? root_key(fingerprint) : keys.back();
  const size_t full = keys.size() * static_cast<size_t>(block_tokens);
  if (full == tokens.size()) return last;
  return block_key(last, tokens.subspan(full), fingerprint);
}

}  // namespace yoco
