#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {
namespace {

constexpr int kBlockQ = 64;
constexpr int kBlockK = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(kBlockQ % vec::kLanes == 0, "a block's queries are whole vectors");

// Key columns [lo, hi) of the whole run that some query of the block can see.
void visible_key_range(const AttentionArgs& a, int i0, int iq, int& lo, int& hi) {
  const int64_t p_first = a.q_pos0 + i0, p_last = a.q_pos0 + i0 + iq - 1;
  int64_t c_lo = a.window > 0 ? p_first - a.window + 1 - a.k_pos0 : 0;
  int64_t c_hi = p_last - a.k_pos0 + 1;
  lo = static_cast<int>(std::clamp<int64_t>(c_lo, 0, a.n_k));
  hi = static_cast<int>(std::clamp<int64_t>(c_hi, 0, a.n_k));
}

// One key tile's online-softmax step on the transposed scores st[c · kBlockQ + i] (key c < ck,
// query i of the block): key c is seen by the queries [lo[c], hi[c]) (the others become 0). The
// queries are the vector lanes, so the running max m[i] and sum l[i] update 16 at a time; the
// accumulator rows acc[i · hd ..] are rescaled (acc null: the first tile, whose P·V overwrites
// them), and st is left holding exp(st − m).
template <typename V>
[[gnu::always_inline]] inline void softmax_tile_body(float* st, int iq, int ck, const int* lo, const int* hi, float* m,
                                                     float* l, float* acc, int hd) {
  constexpr int kV = kBlockQ / vec::kLanes;
  V vm[kV], mnew[kV], msafe[kV], sum[kV];
  for (int v = 0; v < kV; ++v) vm[v] = vec::splat<V>(kNegInf);
  for (int c = 0; c < ck; ++c) {
    float* row = st + static_cast<size_t>(c) * kBlockQ;
    const vec::int_t<V> vlo = vec::splat<vec::int_t<V>>(lo[c]), vhi = vec::splat<vec::int_t<V>>(hi[c]);
    for (int v = 0; v < kV; ++v) {
      const vec::int_t<V> idx = vec::iota<vec::int_t<V>>() + v * vec::kLanes;
      const V x = vec::select((idx >= vlo) & (idx < vhi), vec::load<V>(row + v * vec::kLanes), vec::splat<V>(kNegInf));
      vec::store(row + v * vec::kLanes, x);
      vm[v] = vec::max(vm[v], x);
    }
  }
  for (int v = 0; v < kV; ++v) {
    mnew[v] = vec::max(vec::load<V>(m + v * vec::kLanes), vm[v]);
    // A query that has seen nothing yet keeps max −inf: shift by 0 so exp(−inf − 0) = 0, not NaN.
    msafe[v] = vec::select(mnew[v] == vec::splat<V>(kNegInf), V{}, mnew[v]);
    sum[v] = V{};
  }
  for (int c = 0; c < ck; ++c) {
    float* row = st + static_cast<size_t>(c) * kBlockQ;
    for (int v = 0; v < kV; ++v) {
      const V p = vec::exp(vec::load<V>(row + v * vec::kLanes) - msafe[v]);
      vec::store(row + v * vec::kLanes, p);
      sum[v] += p;
    }
  }
  float corr[kBlockQ];
  for (int v = 0; v < kV; ++v) {
    const V cv = vec::exp(vec::load<V>(m + v * vec::kLanes) - msafe[v]);  // 0 while nothing was seen
    vec::store(corr + v * vec::kLanes, cv);
    vec::store(l + v * vec::kLanes, vec::load<V>(l + v * vec::kLanes) * cv + sum[v]);
    vec::store(m + v * vec::kLanes, mnew[v]);
  }
  if (!acc) return;
  for (int i = 0; i < iq; ++i) {
    if (corr[i] == 1.0f) continue;
    float* ar = acc + static_cast<size_t>(i) * hd;
    int d = 0;
    for (; d + vec::kLanes <= hd; d += vec::kLanes) vec::store(ar + d, vec::load<V>(ar + d) * corr[i]);
    for (; d < hd; ++d) ar[d] *= corr[i];
  }
}

using SoftmaxFn = void (*)(float*, int, int, const int*, const int*, float*, float*, float*, int);
void softmax_tile_default(float* s, int iq, int ck, const int* lo, const int* hi, float* m, float* l, float* acc,
                          int hd) {
  softmax_tile_body<vec::F16Base>(s, iq, ck, lo, hi, m, l, acc, hd);
}
__attribute__((target("avx2,fma"))) void softmax_tile_avx2(float* s, int iq, int ck, const int* lo, const int* hi,
                                                           float* m, float* l, float* acc, int hd) {
  softmax_tile_body<vec::F16Avx2>(s, iq, ck, lo, hi, m, l, acc, hd);
}
__attribute__((target("avx512f"))) void softmax_tile_avx512(float* s, int iq, int ck, const int* lo, const int* hi,
                                                            float* m, float* l, float* acc, int hd) {
  softmax_tile_body<vec::F16Avx512>(s, iq, ck, lo, hi, m, l, acc, hd);
}

// The variant for the running CPU (vec::isa()).
void softmax_tile(float* s, int iq, int ck, const int* lo, const int* hi, float* m, float* l, float* acc, int hd) {
  static const SoftmaxFn fn = vec::pick<SoftmaxFn>(&softmax_tile_default, &softmax_tile_avx2, &softmax_tile_avx512);
  fn(s, iq, ck, lo, hi, m, l, acc, hd);
}

// x[i] = exp(x[i] − shift) for i < n; returns their sum (decode's softmax over all keys).
template <typename V>
[[gnu::always_inline]] inline float exp_sum_body(float* x, int64_t n, float shift) {
  const V vs = vec::splat<V>(shift);
  V acc{};
  int64_t i = 0;
  for (; i + vec::kLanes <= n; i += vec::kLanes) {
    const V e = vec::exp(vec::load<V>(x + i) - vs);
    vec::store(x + i, e);
    acc += e;
  }
  float sum = vec::hsum(acc);
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - shift);
  return sum;
}

using ExpSumFn = float (*)(float*, int64_t, float);
float exp_sum_default(float* x, int64_t n, float shift) { return exp_sum_body<vec::F16Base>(x, n, shift); }
__attribute__((target("avx2,fma"))) float exp_sum_avx2(float* x, int64_t n, float shift) {
  return exp_sum_body<vec::F16Avx2>(x, n, shift);
}
__attribute__((target("avx512f"))) float exp_sum_avx512(float* x, int64_t n, float shift) {
  return exp_sum_body<vec::F16Avx512>(x, n, shift);
}

float exp_sum(float* x, int64_t n, float shift) {
  static const ExpSumFn fn = vec::pick<ExpSumFn>(&exp_sum_default, &exp_sum_avx2, &exp_sum_avx512);
  return fn(x, n, shift);
}

// --- decode attention, fused (head_dim a multiple of 16) ----------------------------------------
// One query per head against all the sequence's keys, in two streams: pass 1 reads K front to
// back once and writes every head's scaled scores s[h · n + c]; the softmax runs over each row of
// s (exp_sum); pass 2 reads V front to back once and accumulates the unnormalised P·V, which is
// divided by the sum at the end. Each K/V row is read whole (all kv heads), so memory sees one
// sequential stream per thread rather than one strided stream per kv head, which reads at half the
// rate (membw's "4 streams" against "1 stream"). Keys are cut into parts of kDecodePart rows by
// absolute index: a part is one thread's work, and P·V sums each part's rows in key order into the
// part's own accumulators, which are then added in part order. Every result is therefore the same
// whatever the blocks and the thread count. Rows are taken kSubRows at a time, so a sub-block stays
// in L1 while every head of every group reads it.
constexpr int kSubRows = 16;
// How far ahead both passes prefetch (rows).
constexpr int kPrefetchRows = 32;
constexpr int kMaxSubGroup = 4;
constexpr int64_t kDecodePart = 128;
// Below this many K elements (n · kv_dim) one thread does the whole step (measured: bench/README.md,
// "decode attention").
constexpr int64_t kDecodeThreadElems = int64_t{1} << 16;

// s[g · lds + r] = scale · q_g · k_r for the rows of one sub-block.
// T is the stored element: float, or uint16_t for bf16 (vec::load widens it exactly).
template <int Gs, typename V, typename T>
[[gnu::always_inline]] inline void decode_scores(const float* q, int hd, const T* k, int ldk, int rows, float scale,
                                                 float* s, int64_t lds) {
  constexpr int kLine = 64 / sizeof(T);  // elements per cache line
  for (int r = 0; r < rows; ++r) {
    const T* kr = k + static_cast<int64_t>(r) * ldk;
    // The same columns kSubRows rows on (the next sub-block): the prefetchers alone leave most of
    // the bandwidth unused on rows read a head's slice at a time. A prefetch never faults.
    for (int p = 0; p < hd; p += kLine) __builtin_prefetch(kr + static_cast<int64_t>(kPrefetchRows) * ldk + p, 0, 3);
    V acc[Gs];
#pragma GCC unroll 4
    for (int g = 0; g < Gs; ++g) acc[g] = V{};
    for (int p = 0; p < hd; p += vec::kLanes) {
      const V kp = vec::load<V>(kr + p);
#pragma GCC unroll 4
      for (int g = 0; g < Gs; ++g) acc[g] += vec::load<V>(q + static_cast<int64_t>(g) * hd + p) * kp;
    }
#pragma GCC unroll 4
    for (int g = 0; g < Gs; ++g) s[static_cast<int64_t>(g) * lds + r] = scale * vec::hsum(acc[g]);
  }
}

// acc[(A · Gs + g) · hd + d] += p[g · lds + r] · v_r[d] for the rows of one sub-block, where the
// set A (of kAcc) is the key's absolute index c0 + r modulo kAcc: with one or two heads per group,
// two sets of independent sums keep the multiply-adds from waiting on each other.
template <int Gs, int kAcc, typename V, typename T>
[[gnu::always_inline]] inline void decode_pv(const float* p, int64_t lds, const T* v, int ldv, int rows, int64_t c0,
                                             int hd, float* acc, int64_t ld_set) {
  for (int d = 0; d < hd; d += vec::kLanes) {
    V a[kAcc][Gs];
#pragma GCC unroll 4
    for (int A = 0; A < kAcc; ++A)
#pragma GCC unroll 4
      for (int g = 0; g < Gs; ++g) a[A][g] = vec::load<V>(acc + A * ld_set + static_cast<int64_t>(g) * hd + d);
    int r = 0;
    if (kAcc == 2 && (c0 & 1) && rows > 0) {  // an odd first key goes to the second set
      const V vr = vec::load<V>(v + d);
#pragma GCC unroll 4
      for (int g = 0; g < Gs; ++g) a[kAcc - 1][g] += vec::splat<V>(p[static_cast<int64_t>(g) * lds]) * vr;
      r = 1;
    }
    for (; r + kAcc <= rows; r += kAcc)
#pragma GCC unroll 4
      for (int A = 0; A < kAcc; ++A) {
        __builtin_prefetch(v + static_cast<int64_t>(r + A + kPrefetchRows) * ldv + d, 0, 3);
        const V vr = vec::load<V>(v + static_cast<int64_t>(r + A) * ldv + d);
#pragma GCC unroll 4
        for (int g = 0; g < Gs; ++g) a[A][g] += vec::splat<V>(p[static_cast<int64_t>(g) * lds + r + A]) * vr;
      }
    if (r < rows) {  // one even key left: the first set
      const V vr = vec::load<V>(v + static_cast<int64_t>(r) * ldv + d);
#pragma GCC unroll 4
      for (int g = 0; g < Gs; ++g) a[0][g] += vec::splat<V>(p[static_cast<int64_t>(g) * lds + r]) * vr;
    }
#pragma GCC unroll 4
    for (int A = 0; A < kAcc; ++A)
#pragma GCC unroll 4
      for (int g = 0; g < Gs; ++g) vec::store(acc + A * ld_set + static_cast<int64_t>(g) * hd + d, a[A][g]);
  }
}

// fn(g0, Gs) over the heads of a group, up to kMaxSubGroup at a time.
template <typename Fn>
[[gnu::always_inline]] inline void for_sub_groups(int group, Fn&& fn) {
  for (int g0 = 0; g0 < group; g0 += kMaxSubGroup) {
    switch (std::min(kMaxSubGroup, group - g0)) {
      case 1:
        fn(g0, std::integral_constant<int, 1>{});
        break;
      case 2:
        fn(g0, std::integral_constant<int, 2>{});
        break;
      case 3:
        fn(g0, std::integral_constant<int, 3>{});
        break;
      default:
        fn(g0, std::integral_constant<int, 4>{});
        break;
    }
  }
}

// The step's shape, shared by both passes.
struct DecodeShape {
  const KvBlocks* kv;
  const int64_t* start_of;  // first key of every block
  int64_t n_blocks;
  int n_q_heads, n_kv_heads, hd, group;
  float scale;
  int n_acc;       // accumulator sets per head (2 for groups of one or two heads)
  int64_t ld_set;  // floats per set: n_q_heads · hd
};

// fn(block, first row in the block, rows, absolute index of that row) for the sub-blocks of keys
// [c_lo, c_hi).
template <typename Fn>
[[gnu::always_inline]] inline void for_sub_blocks(const DecodeShape& sh, int64_t c_lo, int64_t c_hi, Fn&& fn) {
  int64_t b = std::upper_bound(sh.start_of, sh.start_of + sh.n_blocks, c_lo) - sh.start_of - 1;
  for (int64_t c = c_lo; c < c_hi;) {
    while (c >= sh.start_of[b + 1]) ++b;
    const int64_t r0 = c - sh.start_of[b];
    const int rows = static_cast<int>(std::min({static_cast<int64_t>(kSubRows), sh.start_of[b + 1] - c, c_hi - c}));
    fn(b, static_cast<int>(r0), rows, c);
    c += rows;
  }
}

// Block b's K (V) rows as T (float, or uint16_t for a bf16 pool).
template <typename T>
[[gnu::always_inline]] inline const T* k_block(const KvBlocks& kv, int64_t b) {
  if constexpr (std::is_same_v<T, float>) return kv.k_blocks[b];
  else return kv.k16_blocks[b];
}
template <typename T>
[[gnu::always_inline]] inline const T* v_block(const KvBlocks& kv, int64_t b) {
  if constexpr (std::is_same_v<T, float>) return kv.v_blocks[b];
  else return kv.v16_blocks[b];
}

// The lambdas below are always inlined: a lambda does not take the target of the ISA variant it
// sits in, so one left out of line would be compiled for the build's baseline (SSE2 without
// YOCO_NATIVE), where the variant's vectors have no registers.

// Pass 1 over keys [c_lo, c_hi): every head's scores.
template <typename V, typename T>
[[gnu::always_inline]] inline void decode_scores_part_body(const DecodeShape& sh, const float* q, int64_t c_lo,
                                                           int64_t c_hi, float* s) {
  const int hd = sh.hd, ld = sh.n_kv_heads * hd;
  const int64_t n = sh.kv->n_tokens;
  for_sub_blocks(
      sh, c_lo, c_hi, [&](int64_t b, int r0, int rows, int64_t c) __attribute__((always_inline)) {
        const T* k = k_block<T>(*sh.kv, b) + static_cast<int64_t>(r0) * ld;
        for (int kvh = 0; kvh < sh.n_kv_heads; ++kvh)
          for_sub_groups(
              sh.group, [&](int g0, auto gs) __attribute__((always_inline)) {
                const int h = kvh * sh.group + g0;
                decode_scores<decltype(gs)::value, V, T>(q + static_cast<int64_t>(h) * hd, hd,
                                                         k + static_cast<int64_t>(kvh) * hd, ld, rows, sh.scale,
                                                         s + h * n + c, n);
              });
      });
}

// Pass 2 over keys [c_lo, c_hi): P·V added to acc (n_acc sets of ld_set floats).
template <typename V, typename T>
[[gnu::always_inline]] inline void decode_pv_part_body(const DecodeShape& sh, const float* s, int64_t c_lo,
                                                       int64_t c_hi, float* acc) {
  const int hd = sh.hd, ld = sh.n_kv_heads * hd;
  const int64_t n = sh.kv->n_tokens;
  for_sub_blocks(
      sh, c_lo, c_hi, [&](int64_t b, int r0, int rows, int64_t c) __attribute__((always_inline)) {
        const T* v = v_block<T>(*sh.kv, b) + static_cast<int64_t>(r0) * ld;
        for (int kvh = 0; kvh < sh.n_kv_heads; ++kvh) {
          const int h0 = kvh * sh.group;
          const T* vh = v + static_cast<int64_t>(kvh) * hd;
          const float* p = s + h0 * n + c;
          float* ah = acc + static_cast<int64_t>(h0) * hd;
          if (sh.group == 1) decode_pv<1, 2, V, T>(p, n, vh, ld, rows, c, hd, ah, sh.ld_set);
          else if (sh.group == 2) decode_pv<2, 2, V, T>(p, n, vh, ld, rows, c, hd, ah, sh.ld_set);
          else
            for_sub_groups(
                sh.group, [&](int g0, auto gs) __attribute__((always_inline)) {
                  decode_pv<decltype(gs)::value, 1, V, T>(p + static_cast<int64_t>(g0) * n, n, vh, ld, rows, c, hd,
                                                          ah + static_cast<int64_t>(g0) * hd, sh.ld_set);
                });
        }
      });
}

// One pass over keys [lo, hi): scores from q into s, or P·V from s into acc.
enum class DecodePass { kScores, kPv };
template <typename V>
[[gnu::always_inline]] inline void decode_part_body(DecodePass pass, const DecodeShape& sh, const float* in, int64_t lo,
                                                    int64_t hi, float* out) {
  const bool bf16 = sh.kv->k16_blocks != nullptr;
  if (pass == DecodePass::kScores) {
    if (bf16) decode_scores_part_body<V, uint16_t>(sh, in, lo, hi, out);
    else decode_scores_part_body<V, float>(sh, in, lo, hi, out);
  } else {
    if (bf16) decode_pv_part_body<V, uint16_t>(sh, in, lo, hi, out);
    else decode_pv_part_body<V, float>(sh, in, lo, hi, out);
  }
}
using DecodePartFn = void (*)(DecodePass, const DecodeShape&, const float*, int64_t, int64_t, float*);
void decode_part_default(DecodePass pass, const DecodeShape& sh, const float* in, int64_t lo, int64_t hi, float* out) {
  decode_part_body<vec::F16Base>(pass, sh, in, lo, hi, out);
}
__attribute__((target("avx2,fma"))) void decode_part_avx2(DecodePass pass, const DecodeShape& sh, const float* in,
                                                          int64_t lo, int64_t hi, float* out) {
  decode_part_body<vec::F16Avx2>(pass, sh, in, lo, hi, out);
}
__attribute__((target("avx512f"))) void decode_part_avx512(DecodePass pass, const DecodeShape& sh, const float* in,
                                                           int64_t lo, int64_t hi, float* out) {
  decode_part_body<vec::F16Avx512>(pass, sh, in, lo, hi, out);
}

// The fused step (the variants for the running CPU, vec::isa()).
void decode_attention_fused(const float* q, const KvBlocks& kv, const std::vector<int64_t>& start_of, float* out,
                            int n_q_heads, int n_kv_heads, int hd, float scale) {
  static const DecodePartFn part =
      vec::pick<DecodePartFn>(&decode_part_default, &decode_part_avx2, &decode_part_avx512);
  const int group = n_q_heads / n_kv_heads;
  const int64_t n = kv.n_tokens;
  DecodeShape sh{&kv,   start_of.data(),    static_cast<int64_t>(start_of.size()) - 1, n_q_heads, n_kv_heads, hd, group,
                 scale, group <= 2 ? 2 : 1, static_cast<int64_t>(n_q_heads) * hd};
  const int64_t n_parts = std::max<int64_t>(1, (n + kDecodePart - 1) / kDecodePart);
  const int64_t part_floats = sh.n_acc * sh.ld_set;
  thread_local std::vector<float> s, acc, inv;
  s.resize(static_cast<size_t>(n_q_heads) * n);
  acc.assign(static_cast<size_t>(n_parts * part_floats), 0.0f);
  float* sp = s.data();
  float* ap = acc.data();
  inv.resize(n_q_heads);
  float* ip = inv.data();  // the caller's: the region's threads each have their own thread_locals
  const bool par = !omp_in_parallel() && n_parts > 1 && n * n_kv_heads * hd >= kDecodeThreadElems;
#pragma omp parallel if (par)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n_parts; ++i)
      part(DecodePass::kScores, sh, q, i * kDecodePart, std::min(n, (i + 1) * kDecodePart), sp);
#pragma omp for schedule(static)
    for (int h = 0; h < n_q_heads; ++h) {
      float* sh_row = sp + static_cast<int64_t>(h) * n;
      float mx = kNegInf;
      for (int64_t c = 0; c < n; ++c) mx = std::max(mx, sh_row[c]);
      const float sum = exp_sum(sh_row, n, mx);
      ip[h] = sum > 0 ? 1.0f / sum : 0.0f;
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n_parts; ++i)
      part(DecodePass::kPv, sh, sp, i * kDecodePart, std::min(n, (i + 1) * kDecodePart), ap + i * part_floats);
#pragma omp for schedule(static)
    for (int h = 0; h < n_q_heads; ++h)
      for (int d = 0; d < hd; ++d) {
        const int64_t e = static_cast<int64_t>(h) * hd + d;
        float sum = 0;
        for (int64_t i = 0; i < n_parts; ++i)
          for (int A = 0; A < sh.n_acc; ++A) sum += ap[i * part_floats + A * sh.ld_set + e];
        out[e] = sum * ip[h];
      }
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  const int hd = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  const int n_qb = (a.n_q + kBlockQ - 1) / kBlockQ;
  const int n_tasks = a.n_q_heads * n_qb;
#pragma omp parallel if (n_tasks > 1)
  {
    // Flash-attention order per (head, query block): scores for one key tile, online softmax,
    // then accumulate P·V, so memory stays O(block) whatever the sequence length. The products
    // run on this thread through gemm_tile, never a library. Scores are kept transposed (key
    // rows, query columns): Sᵀ = K·(scale·Q)ᵀ needs Qᵀ laid out once per block instead of Kᵀ
    // once per tile, and the softmax runs across queries in vector lanes. The V tile is copied
    // into consecutive rows: its rows are a whole K/V row apart in memory (often 4 KiB, which
    // maps them all to the same L1 sets and each to its own page).
    std::vector<float> qt(static_cast<size_t>(hd) * kBlockQ), st(static_cast<size_t>(kBlockK) * kBlockQ),
        vt(static_cast<size_t>(kBlockK) * hd), acc(static_cast<size_t>(kBlockQ) * hd);
    std::vector<float> m(kBlockQ), l(kBlockQ);
    std::vector<int> lo(kBlockK), hi(kBlockK);
#pragma omp for schedule(dynamic)
    for (int task = 0; task < n_tasks; ++task) {
      const int h = task / n_qb, qb = task % n_qb;
      const int kvh = h / group;
      const int i0 = qb * kBlockQ, iq = std::min(kBlockQ, a.n_q - i0);
      const float* q = a.q + static_cast<int64_t>(i0) * a.ldq + static_cast<int64_t>(h) * hd;
      // Row by row of qt, so its stores are consecutive (the loads of one column of q hit the
      // same 64 cache lines for 16 columns in a row).
      for (int d = 0; d < hd; ++d) {
        float* qd = qt.data() + static_cast<size_t>(d) * kBlockQ;
        for (int i = 0; i < iq; ++i) qd[i] = a.scale * q[static_cast<int64_t>(i) * a.ldq + d];
        std::fill(qd + iq, qd + kBlockQ, 0.0f);
      }
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      int c_lo, c_hi;
      visible_key_range(a, i0, iq, c_lo, c_hi);
      if (c_lo >= c_hi) std::fill(acc.begin(), acc.end(), 0.0f);  // else the first tile's P·V sets it
      const int64_t q_first = a.q_pos0 + i0;
      for (int c0 = c_lo; c0 < c_hi; c0 += kBlockK) {
        const int ck = std::min(kBlockK, c_hi - c0);
        const float* k = a.k + static_cast<int64_t>(c0) * a.ldk + static_cast<int64_t>(kvh) * hd;
        const float* v = a.v + static_cast<int64_t>(c0) * a.ldv + static_cast<int64_t>(kvh) * hd;
        gemm_tile(ck, kBlockQ, hd, 1.0f, k, a.ldk, qt.data(), kBlockQ, false, 0.0f, st.data(), kBlockQ);
        // Key c (position kp) is seen by the queries at positions [kp, kp + window): block
        // columns [lo, hi), and never by the columns past iq.
        for (int c = 0; c < ck; ++c) {
          const int64_t kp = a.k_pos0 + c0 + c;
          lo[c] = static_cast<int>(std::clamp<int64_t>(kp - q_first, 0, iq));
          hi[c] = a.window > 0 ? static_cast<int>(std::clamp<int64_t>(kp + a.window - q_first, 0, iq)) : iq;
          std::copy_n(v + static_cast<int64_t>(c) * a.ldv, hd, vt.data() + static_cast<size_t>(c) * hd);
        }
        const bool first = c0 == c_lo;
        softmax_tile(st.data(), iq, ck, lo.data(), hi.data(), m.data(), l.data(), first ? nullptr : acc.data(), hd);
        gemm_tile_at(iq, hd, ck, 1.0f, st.data(), kBlockQ, vt.data(), hd, first ? 0.0f : 1.0f, acc.data(), hd);
      }
      for (int r = 0; r < iq; ++r) {
        float* o = a.out + static_cast<int64_t>(i0 + r) * a.ldo + static_cast<int64_t>(h) * hd;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(r) * hd + d] * inv;
      }
    }
  }
}

void attention_reference(const AttentionArgs& a) {
  const int hd = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  std::vector<double> sc(a.n_k);
  for (int i = 0; i < a.n_q; ++i) {
    const int64_t qp = a.q_pos0 + i;
    for (int h = 0; h < a.n_q_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + static_cast<int64_t>(i) * a.ldq + static_cast<int64_t>(h) * hd;
      double mx = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < a.n_k; ++c) {
        const int64_t kp = a.k_pos0 + c;
        const bool visible = kp <= qp && !(a.window > 0 && kp <= qp - a.window);
        if (!visible) {
          sc[c] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const float* k = a.k + static_cast<int64_t>(c) * a.ldk + static_cast<int64_t>(kvh) * hd;
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
        sc[c] = dot * a.scale;
        mx = std::max(mx, sc[c]);
      }
      double sum = 0;
      for (int c = 0; c < a.n_k; ++c) {
        sc[c] = std::isinf(sc[c]) ? 0.0 : std::exp(sc[c] - mx);
        sum += sc[c];
      }
      float* o = a.out + static_cast<int64_t>(i) * a.ldo + static_cast<int64_t>(h) * hd;
      for (int d = 0; d < hd; ++d) {
        double acc = 0;
        for (int c = 0; c < a.n_k; ++c)
          if (sc[c] != 0) acc += sc[c] * a.v[static_cast<int64_t>(c) * a.ldv + static_cast<int64_t>(kvh) * hd + d];
        o[d] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
      }
    }
  }
}

void decode_attention(const float* q, const KvBlocks& kv, float* out, int n_q_heads, int n_kv_heads, int head_dim,
                      float scale) {
  const int hd = head_dim;
  const int group = n_q_heads / n_kv_heads;
  const int kv_dim = n_kv_heads * hd;
  const int64_t n = kv.n_tokens;
  // Row count and first key index of every block.
  std::vector<int> rows_of;
  std::vector<int64_t> start_of;
  for (int64_t done = 0, b = 0; done < n; ++b) {
    const int rows = static_cast<int>(kv.block_rows ? kv.block_rows[b] : std::min<int64_t>(kv.block_size, n - done));
    rows_of.push_back(rows);
    start_of.push_back(done);
    done += rows;
  }
  const int64_t n_blocks = static_cast<int64_t>(rows_of.size());
  if (kv.k16_blocks && hd % vec::kLanes != 0) {
    // The general path below is fp32: widen the rows once (head sizes no model here uses).
    std::vector<float> k32(static_cast<size_t>(n) * kv_dim), v32(k32.size());
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int64_t i = 0; i < static_cast<int64_t>(rows_of[b]) * kv_dim; ++i) {
        k32[start_of[b] * kv_dim + i] = vec::widen(kv.k16_blocks[b][i]);
        v32[start_of[b] * kv_dim + i] = vec::widen(kv.v16_blocks[b][i]);
      }
    std::vector<const float*> kp(n_blocks), vp(n_blocks);  // the same blocks, so the same sums
    for (int64_t b = 0; b < n_blocks; ++b) {
      kp[b] = k32.data() + start_of[b] * kv_dim;
      vp[b] = v32.data() + start_of[b] * kv_dim;
    }
    const KvBlocks wide{kp.data(), vp.data(), kv.block_size, n, rows_of.data()};
    return decode_attention(q, wide, out, n_q_heads, n_kv_heads, head_dim, scale);
  }
  if (hd % vec::kLanes == 0) {
    start_of.push_back(n);
    return decode_attention_fused(q, kv, start_of, out, n_q_heads, n_kv_heads, hd, scale);
  }
  const bool par = !omp_in_parallel() && n_kv_heads > 1 && n * kv_dim > (1 << 20);
#pragma omp parallel for schedule(static) if (par)
  for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
    // The query heads of one GQA group are adjacent: score them together so each K/V row of
    // this kv head is read once per step.
    const float* qg = q + static_cast<int64_t>(kvh) * group * hd;
    // The products run on this thread whatever the caller's parallel region: q·Kᵀ streams K once
    // for the group (gemv.cc), P·V through gemm_tile.
    std::vector<float> s(static_cast<size_t>(group) * n);
    for (int64_t b = 0; b < n_blocks; ++b) {
      const float* kb = kv.k_blocks[b] + static_cast<int64_t>(kvh) * hd;
      float* sb = s.data() + start_of[b];
      if (group <= kSmallM)
        gemm_small_m(group, rows_of[b], hd, scale, qg, hd, kb, kv_dim, 0.0f, sb, static_cast<int>(n));
      else gemm_tile(group, rows_of[b], hd, scale, qg, hd, kb, kv_dim, true, 0.0f, sb, static_cast<int>(n));
    }
    for (int g = 0; g < group; ++g) {
      float* sr = s.data() + static_cast<size_t>(g) * n;
      float mx = kNegInf;
      for (int64_t c = 0; c < n; ++c) mx = std::max(mx, sr[c]);
      const float inv = 1.0f / exp_sum(sr, n, mx);
      for (int64_t c = 0; c < n; ++c) sr[c] *= inv;
    }
    float* og = out + static_cast<int64_t>(kvh) * group * hd;
    for (int i = 0; i < group * hd; ++i) og[i] = 0;
    for (int64_t b = 0; b < n_blocks; ++b)
      gemm_tile(group, hd, rows_of[b], 1.0f, s.data() + start_of[b], static_cast<int>(n),
                kv.v_blocks[b] + static_cast<int64_t>(kvh) * hd, kv_dim, false, 1.0f, og, hd);
  }
}

}  // namespace yoco::cpu
