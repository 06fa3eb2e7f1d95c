// K/V rows as the hand-off and store formats carry them (docs/design.md, hand-off format):
// fp32, or bf16 rounded to nearest even and widened back exactly. The one fp32 ↔ bf16
// conversion of the project lives here; the checkpoint loader and the CUDA engine use it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace yoco {

enum class KvDType : uint32_t { kF32 = 0, kBF16 = 1 };

inline size_t kv_dtype_bytes(KvDType d) { return d == KvDType::kBF16 ? 2 : 4; }
const char* kv_dtype_name(KvDType d);

// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_f32(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// n values of `in` as n · kv_dtype_bytes(dtype) little-endian bytes at `out`.
void encode_kv_values(const float* in, int64_t n, KvDType dtype, uint8_t* out);
// The reverse: n values from n · kv_dtype_bytes(dtype) bytes.
void decode_kv_values(const uint8_t* in, int64_t n, KvDType dtype, float* out);

}  // namespace yoco
