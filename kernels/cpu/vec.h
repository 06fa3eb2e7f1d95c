// 16-float vectors for the CPU kernels compiled once per ISA (GCC vector extensions: one AVX-512
// register, two AVX2 registers or four SSE ones, as the including function's target decides).
// Everything here is always inlined, so it takes the ISA of the variant it is inlined into.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

// Vectors are never passed by value across a call (all helpers are inlined), so GCC's note about
// the ABI of 64-byte vectors in builds without AVX-512 never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace yoco::cpu::vec {

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));
// Unaligned access that may alias the floats (the idiom of the compilers' own _mm512_loadu_ps).
typedef float v16_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
constexpr int kLanes = 16;

// The variant of a per-ISA kernel to run: the widest the CPU has, chosen on first use (not GCC's
// target_clones: its ifunc resolver runs before a sanitizer's runtime is up and crashes a TSan
// build at start). YOCO_CPU_ISA=avx2|base narrows it, so the tests run every variant's register
// blocking on one machine (and narrows oneDNN the same way: gemm_dnnl.cc).
enum class Isa { kBase, kAvx2, kAvx512 };
inline Isa isa() {
  static const Isa chosen = [] {
    __builtin_cpu_init();
    Isa best = Isa::kBase;
    if (__builtin_cpu_supports("avx512f")) best = Isa::kAvx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
    const char* env = std::getenv("YOCO_CPU_ISA");
    if (env && std::strcmp(env, "base") == 0) return Isa::kBase;
    if (env && std::strcmp(env, "avx2") == 0 && best == Isa::kAvx512) return Isa::kAvx2;
    return best;
  }();
  return chosen;
}

// One of three variants of a kernel by isa().
template <typename Fn>
Fn pick(Fn base, Fn avx2, Fn avx512) {
  switch (isa()) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    default:
      return base;
  }
}

[[gnu::always_inline]] inline v16 load(const float* p) { return *reinterpret_cast<const v16_unaligned*>(p); }
// A bf16 value (the upper half of an fp32) widened to fp32, exactly.
[[gnu::always_inline]] inline float widen(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// 16 bf16 values widened to fp32, exactly.
typedef uint16_t h16_unaligned __attribute__((vector_size(32), aligned(2), may_alias));
typedef uint32_t u16x __attribute__((vector_size(64)));
[[gnu::always_inline]] inline v16 load(const uint16_t* p) {
  return __builtin_bit_cast(v16, __builtin_convertvector(*reinterpret_cast<const h16_unaligned*>(p), u16x) << 16);
}
[[gnu::always_inline]] inline void store(float* p, v16 x) { *reinterpret_cast<v16_unaligned*>(p) = x; }
// All lanes x: one broadcast (v16{} + x would add 0.0 first, which the compiler must keep for −0).
[[gnu::always_inline]] inline v16 splat(float x) { return v16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
[[gnu::always_inline]] inline i16 iota() { return i16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; }

[[gnu::always_inline]] inline v16 max(v16 a, v16 b) { return a > b ? a : b; }

// Pairwise lane reductions in a fixed order (lane i with lane i+8, then i+4, i+2, i+1), so a
// result never depends on how many rows a kernel computed together. The sum halves by shuffles:
// the same additions as a scalar loop, in a few vector instructions (it runs once per output of
// a decode step's products).
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));
[[gnu::always_inline]] inline float hsum(v16 v) {
  const v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const v2 c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
  return c[0] + c[1];
}
[[gnu::always_inline]] inline float hmax(v16 v) {
  float s[kLanes];
  for (int i = 0; i < kLanes; ++i) s[i] = v[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) s[i] = s[i] > s[i + w] ? s[i] : s[i + w];
  return s[0];
}

// e^x for x <= 88 (softmax and decay arguments are <= 0), relative error ~2 ulp: x = n·ln2 + r with
// |r| <= ln2/2, a degree-6 polynomial for e^r (Cephes' expf), 2^n through the exponent bits.
// Below −87.3 (and at −inf, NaN excluded) the result is exactly 0.
[[gnu::always_inline]] inline v16 exp(v16 x) {
  const v16 lo = splat(-87.3f);
  const v16 xc = x < lo ? lo : (x > splat(88.0f) ? splat(88.0f) : x);
  const v16 magic = splat(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
  const v16 t = xc * splat(1.44269504088896341f) + magic;
  const v16 n = t - magic;
  const v16 r = (xc - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
  v16 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const i16 bits = (__builtin_convertvector(n, i16) + 127) << 23;
  const v16 y = p * (v16)bits;  // a vector cast keeps the bits
  return x < lo ? v16{} : y;
}

}  // namespace yoco::cpu::vec
