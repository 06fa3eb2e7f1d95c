#include "common/checksum.h"

#include <array>
#include <cstring>

namespace yoco {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC32C (Castagnoli), reflected

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc32c_sw(const unsigned char* p, size_t n, uint32_t crc) {
  static const auto table = make_table();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

// a(x) · b(x) modulo the polynomial, both reflected (bit 31 is x^0).
uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8n) modulo the polynomial: appending n zero bytes multiplies a CRC register by it.
uint32_t x8nmodp(size_t n) {
  uint32_t x2k = 1u << 30;  // x^1, then x^2, x^4, ... by squaring
  uint32_t p = 1u << 31;    // x^0
  for (size_t bits = 8 * n; bits; bits >>= 1) {
    if (bits & 1) p = multmodp(x2k, p);
    x2k = multmodp(x2k, x2k);
  }
  return p;
}

// The register after `n` more zero bytes, as four table lookups (one per byte of the register).
struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  explicit ZeroShift(size_t n) {
    const uint32_t op = x8nmodp(n);
    for (int b = 0; b < 4; ++b)
      for (uint32_t v = 0; v < 256; ++v) t[b][v] = multmodp(op, v << (8 * b));
  }
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

#if defined(__x86_64__)
// Three independent streams over thirds of a block hide the crc32 instruction's 3-cycle latency
// (one stream reaches a third of its throughput); the three CRCs are then joined by shifting the
// first two past the bytes that follow them: crc(A‖B) = shift_|B|(crc(A)) ^ crc0(B).
template <size_t kStride>
__attribute__((target("sse4.2"))) inline uint64_t crc32c_3way(const unsigned char*& p, size_t& n, uint64_t c,
                                                              const ZeroShift& shift) {
  while (n >= 3 * kStride) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kStride + i, 8);
      std::memcpy(&v2, p + 2 * kStride + i, 8);
      c = __builtin_ia32_crc32di(c, v0);
      c1 = __builtin_ia32_crc32di(c1, v1);
      c2 = __builtin_ia32_crc32di(c2, v2);
    }
    c = shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
    c = shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c2);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  return c;
}

constexpr size_t kLong = 4096, kShort = 128;  // bytes per stream (a K/V row is ~2 KiB)

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const unsigned char* p, size_t n, uint32_t crc) {
  static const ZeroShift long_shift(kLong), short_shift(kShort);
  uint64_t c = crc;
  c = crc32c_3way<kLong>(p, n, c, long_shift);
  c = crc32c_3way<kShort>(p, n, c, short_shift);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  return ~crc32c_sw(static_cast<const unsigned char*>(data), n, ~crc);
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crc32c_hw(p, n, crc) : crc32c_sw(p, n, crc);
#else
  crc = crc32c_sw(p, n, crc);
#endif
  return ~crc;
}

std::string hex64(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return s;
}

}  // namespace yoco
