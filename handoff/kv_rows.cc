#include "handoff/kv_rows.h"

#include "handoff/bytes.h"

namespace yoco {

const char* kv_dtype_name(KvDType d) { return d == KvDType::kBF16 ? "bf16" : "f32"; }

void encode_kv_values(const float* in, int64_t n, KvDType dtype, uint8_t* out) {
  if (dtype == KvDType::kF32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);  // little-endian host (handoff/bytes.h)
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_le<uint16_t>(out + 2 * i, f32_to_bf16(in[i]));
}

void decode_kv_values(const uint8_t* in, int64_t n, KvDType dtype, float* out) {
  if (dtype == KvDType::kF32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_le<uint16_t>(in + 2 * i));
}

}  // namespace yoco
