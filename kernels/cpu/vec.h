// 16-float vectors for the CPU kernels compiled once per ISA. A kernel body is a template over
// its vector type V, and each ISA variant instantiates it with its own: one AVX-512 register
// (v16, a GCC vector), or 16 lanes held as two AVX2 registers (lanes16<v8>) or four SSE ones
// (lanes16<v4>). A 64-byte GCC vector without AVX-512 is no substitute: GCC has no register mode
// for it, so every such variable lives on the stack, and a loop-carried accumulator is stored and
// reloaded in pieces each iteration (on an AVX2-only EPYC the decode products ran at a third of
// the read bandwidth: bench/README.md, "The AVX2 engine and llama.cpp"). Lanes are numbered the
// same in every type and each helper does the same per-lane operations, so a result differs
// between the types only where the ISA's instructions do (an FMA against a multiply and an add).
// Everything here is always inlined, so it takes the ISA of the variant it is inlined into.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

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

// Native GCC vectors of 16, 8 and 4 lanes: float, int32 (comparison masks, exponent bits) and
// the uint16 / uint32 halves of bf16 widening.
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));
typedef int32_t i8x __attribute__((vector_size(32)));
typedef int32_t i4x __attribute__((vector_size(16)));

template <int W>
struct native {
  typedef float f __attribute__((vector_size(4 * W)));
  typedef int32_t i __attribute__((vector_size(4 * W)));
  typedef uint32_t u __attribute__((vector_size(4 * W)));
  typedef uint16_t h __attribute__((vector_size(2 * W)));
};
template <typename N>
constexpr int width = sizeof(N) / 4;

// 16 lanes as kLanes / width<N> native vectors N (lanes 0.. in p[0], the next in p[1], ...).
template <typename N>
struct lanes16 {
  static constexpr int kParts = kLanes / width<N>;
  N p[kParts];
};
template <typename V>
struct is_lanes16 : std::false_type {};
template <typename N>
struct is_lanes16<lanes16<N>> : std::true_type {};

// The vector type of each ISA variant.
using F16Base = lanes16<v4>;
using F16Avx2 = lanes16<v8>;
using F16Avx512 = v16;

#define YOCO_VEC_PARTS(q, V) _Pragma("GCC unroll 4") for (int q = 0; q < V::kParts; ++q)
#define YOCO_VEC_BINARY(op)                                                                  \
  template <typename N>                                                                      \
  [[gnu::always_inline]] inline auto operator op(const lanes16<N>& a, const lanes16<N>& b) { \
    lanes16<decltype(a.p[0] op b.p[0])> r;                                                   \
    YOCO_VEC_PARTS(q, lanes16<N>) r.p[q] = a.p[q] op b.p[q];                                 \
    return r;                                                                                \
  }                                                                                          \
  template <typename N, typename S, typename = std::enable_if_t<std::is_arithmetic_v<S>>>    \
  [[gnu::always_inline]] inline lanes16<N> operator op(const lanes16<N>& a, S s) {           \
    lanes16<N> r;                                                                            \
    YOCO_VEC_PARTS(q, lanes16<N>) r.p[q] = a.p[q] op s;                                      \
    return r;                                                                                \
  }                                                                                          \
  template <typename N, typename S, typename = std::enable_if_t<std::is_arithmetic_v<S>>>    \
  [[gnu::always_inline]] inline lanes16<N> operator op(S s, const lanes16<N>& a) {           \
    lanes16<N> r;                                                                            \
    YOCO_VEC_PARTS(q, lanes16<N>) r.p[q] = s op a.p[q];                                      \
    return r;                                                                                \
  }
YOCO_VEC_BINARY(+)
YOCO_VEC_BINARY(-)
YOCO_VEC_BINARY(*)
YOCO_VEC_BINARY(/)
YOCO_VEC_BINARY(&)
YOCO_VEC_BINARY(<<)
YOCO_VEC_BINARY(<)
YOCO_VEC_BINARY(>)
YOCO_VEC_BINARY(>=)
YOCO_VEC_BINARY(==)
#undef YOCO_VEC_BINARY
template <typename N>
[[gnu::always_inline]] inline lanes16<N> operator-(const lanes16<N>& a) {
  lanes16<N> r;
  YOCO_VEC_PARTS(q, lanes16<N>) r.p[q] = -a.p[q];
  return r;
}
template <typename N>
[[gnu::always_inline]] inline lanes16<N>& operator+=(lanes16<N>& a, const lanes16<N>& b) {
  YOCO_VEC_PARTS(q, lanes16<N>) a.p[q] += b.p[q];
  return a;
}

// The lanes of m (a comparison's result) taken from a, the others from b.
template <typename M, typename N>
[[gnu::always_inline]] inline N select(M m, N a, N b) {
  return m ? a : b;
}
template <typename M, typename N>
[[gnu::always_inline]] inline lanes16<N> select(const lanes16<M>& m, const lanes16<N>& a, const lanes16<N>& b) {
  lanes16<N> r;
  YOCO_VEC_PARTS(q, lanes16<N>) r.p[q] = m.p[q] ? a.p[q] : b.p[q];
  return r;
}

// The int32 vector of V's shape (masks, lane indices).
template <typename V>
struct int_of {
  using type = typename native<width<V>>::i;
};
template <typename N>
struct int_of<lanes16<N>> {
  using type = lanes16<typename native<width<N>>::i>;
};
template <typename V>
using int_t = typename int_of<V>::type;

// All lanes x (for float: one broadcast; V{} + x would add 0.0 first, which the compiler must
// keep for −0).
template <typename V, typename S>
[[gnu::always_inline]] inline V splat(S x) {
  if constexpr (is_lanes16<V>::value) {
    V r;
    YOCO_VEC_PARTS(q, V) r.p[q] = splat<std::remove_reference_t<decltype(r.p[0])>>(x);
    return r;
  } else if constexpr (width<V> == 16) {
    return V{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
  } else if constexpr (width<V> == 8) {
    return V{x, x, x, x, x, x, x, x};
  } else {
    return V{x, x, x, x};
  }
}
// Lane i holds i (V an int32 vector).
template <typename V>
[[gnu::always_inline]] inline V iota() {
  if constexpr (is_lanes16<V>::value) {
    using N = std::remove_reference_t<decltype(V{}.p[0])>;
    V r;
    YOCO_VEC_PARTS(q, V) r.p[q] = iota<N>() + q * width<N>;
    return r;
  } else if constexpr (width<V> == 16) {
    return V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  } else if constexpr (width<V> == 8) {
    return V{0, 1, 2, 3, 4, 5, 6, 7};
  } else {
    return V{0, 1, 2, 3};
  }
}
// The default: the AVX-512 variant's lanes (kept for callers outside a variant).
[[gnu::always_inline]] inline v16 splat(float x) { return splat<v16>(x); }
[[gnu::always_inline]] inline i16 iota() { return iota<i16>(); }

// Lane i of v.
template <typename V>
[[gnu::always_inline]] inline float lane(const V& v, int i) {
  if constexpr (is_lanes16<V>::value) return v.p[i / width<decltype(v.p[0])>][i % width<decltype(v.p[0])>];
  else return v[i];
}

// 16 floats from p, unaligned; or 16 bf16 values (the upper halves of fp32) widened exactly.
template <typename V>
[[gnu::always_inline]] inline V load(const float* p) {
  if constexpr (is_lanes16<V>::value) {
    // Part by part through the native load: a memcpy into r.p[q] stayed a call to memcpy in the
    // -O1 ASan build, ASan's interceptor on every vector load (a quarter of a cluster test's CPU
    // time there); into a local it folds to one load at any level (store likewise).
    V r;
    YOCO_VEC_PARTS(q, V) r.p[q] = load<std::remove_reference_t<decltype(r.p[0])>>(p + q * width<decltype(r.p[0])>);
    return r;
  } else {
    V r;
    std::memcpy(&r, p, sizeof(V));
    return r;
  }
}
template <typename V>
[[gnu::always_inline]] inline V load(const uint16_t* p) {
  if constexpr (is_lanes16<V>::value) {
    V r;
    YOCO_VEC_PARTS(q, V) r.p[q] = load<std::remove_reference_t<decltype(r.p[0])>>(p + q * width<decltype(r.p[0])>);
    return r;
  } else {
    using T = native<width<V>>;
    typename T::h h;
    std::memcpy(&h, p, sizeof(h));
    return __builtin_bit_cast(V, __builtin_convertvector(h, typename T::u) << 16);
  }
}
[[gnu::always_inline]] inline v16 load(const float* p) { return load<v16>(p); }
[[gnu::always_inline]] inline v16 load(const uint16_t* p) { return load<v16>(p); }
// A bf16 value (the upper half of an fp32) widened to fp32, exactly.
[[gnu::always_inline]] inline float widen(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <typename V>
[[gnu::always_inline]] inline void store(float* p, const V& x) {
  if constexpr (is_lanes16<V>::value) {
    YOCO_VEC_PARTS(q, V) {
      const auto part = x.p[q];  // from a local, as in load
      std::memcpy(p + q * width<decltype(part)>, &part, sizeof(part));
    }
  } else {
    std::memcpy(p, &x, sizeof(V));
  }
}

template <typename V>
[[gnu::always_inline]] inline V max(const V& a, const V& b) {
  return select(a > b, a, b);
}

// Pairwise lane reductions in a fixed order (lane i with lane i+8, then i+4, i+2, i+1), so a
// result never depends on how many rows a kernel computed together, nor on the vector type. The
// sum halves by shuffles: the same additions as a scalar loop, in a few vector instructions (it
// runs once per output of a decode step's products).
[[gnu::always_inline]] inline float hsum8(v8 a) {
  const v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const v2 c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
  return c[0] + c[1];
}
[[gnu::always_inline]] inline float hsum(v16 v) {
  return hsum8(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}
[[gnu::always_inline]] inline float hsum(const lanes16<v8>& v) { return hsum8(v.p[0] + v.p[1]); }
[[gnu::always_inline]] inline float hsum(const lanes16<v4>& v) {
  // Lanes i and i+8 are p[0] + p[2] (i < 4) and p[1] + p[3] (4 <= i < 8); then as hsum8.
  const v4 lo = v.p[0] + v.p[2], hi = v.p[1] + v.p[3];
  const v4 b = lo + hi;
  const v2 c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
  return c[0] + c[1];
}
template <typename V>
[[gnu::always_inline]] inline float hmax(const V& v) {
  float s[kLanes];
  for (int i = 0; i < kLanes; ++i) s[i] = lane(v, i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) s[i] = s[i] > s[i + w] ? s[i] : s[i + w];
  return s[0];
}

// e^x for x <= 88 (softmax and decay arguments are <= 0), relative error ~2 ulp: x = n·ln2 + r with
// |r| <= ln2/2, a degree-6 polynomial for e^r (Cephes' expf), 2^n through the exponent bits.
// Below −87.3 (and at −inf, NaN excluded) the result is exactly 0.
template <typename V>
[[gnu::always_inline]] inline V exp(V x) {
  if constexpr (is_lanes16<V>::value) {
    YOCO_VEC_PARTS(q, V) x.p[q] = exp(x.p[q]);
    return x;
  } else {
    const V lo = splat<V>(-87.3f);
    const V xc = x < lo ? lo : (x > splat<V>(88.0f) ? splat<V>(88.0f) : x);
    const V magic = splat<V>(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
    const V t = xc * splat<V>(1.44269504088896341f) + magic;
    const V n = t - magic;
    const V r = (xc - n * splat<V>(0.693359375f)) - n * splat<V>(-2.12194440e-4f);
    V p = splat<V>(1.9875691500e-4f);
    p = p * r + splat<V>(1.3981999507e-3f);
    p = p * r + splat<V>(8.3334519073e-3f);
    p = p * r + splat<V>(4.1665795894e-2f);
    p = p * r + splat<V>(1.6666665459e-1f);
    p = p * r + splat<V>(5.0000001201e-1f);
    p = p * (r * r) + r + splat<V>(1.0f);
    const int_t<V> bits = (__builtin_convertvector(n, int_t<V>) + 127) << 23;
    const V y = p * (V)bits;  // a vector cast keeps the bits
    return x < lo ? V{} : y;
  }
}
#undef YOCO_VEC_PARTS

}  // namespace yoco::cpu::vec
