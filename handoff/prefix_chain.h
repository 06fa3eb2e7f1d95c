// The one prefix hash chain over token ids (docs/design.md, hand-off and store formats): the KV
// store names blocks and states by it, the decode worker finds shareable pool blocks by it, the
// router can pick a prefill worker by it. A key is a function of the model fingerprint and
// every token up to the end of its block, so equal keys mean equal prefixes on the same model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace yoco {

// 128 bits: two independent 64-bit hashes (FNV-1a and a mix64 chain) of the same bytes.
struct BlockKey {
  uint64_t a = 0, b = 0;
  std::string hex() const;                   // 32 lowercase hex chars
  uint64_t fold64() const { return a ^ b; }  // where 64 bits are enough (in-process indexes)
  bool operator==(const BlockKey&) const = default;
};

// The chain's root: a function of the model fingerprint alone.
BlockKey root_key(uint64_t fingerprint);
// key(i) = hash(key(i−1), token ids of block i, fingerprint). The token count is hashed too,
// so a short (tail) block never collides with a full one.
BlockKey block_key(const BlockKey& prev, std::span<const int32_t> block_tokens, uint64_t fingerprint);
// Keys of the full blocks of `tokens` (a trailing partial block gets none).
std::vector<BlockKey> chain_keys(std::span<const int32_t> tokens, int block_tokens, uint64_t fingerprint);
// The key of all of `tokens`: the last full block's key, or the trailing partial block chained
// onto it. Empty tokens: the root.
BlockKey prefix_key(std::span<const int32_t> tokens, int block_tokens, uint64_t fingerprint);

// The same 128-bit hash of any byte string (content-addressed ids).
BlockKey hash128(std::span<const uint8_t> bytes);

}  // namespace yoco
