// Checksums for everything that crosses a process or a disk: CRC32C (hardware where the
// CPU has SSE4.2, three streams interleaved) and a 64-bit FNV-1a for short identity strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace yoco {

// CRC32C of n bytes continuing from `crc` (the CRC of what came before): the SSE4.2 instruction
// over three interleaved streams where the CPU has it (memory speed), else a table.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table version alone, for tests and benchmarks.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

// 16 lowercase hex digits (model fingerprints, hash keys).
std::string hex64(uint64_t v);

inline uint64_t fnv1a64(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t mix64(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over the running value: cheap and well distributed.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace yoco
