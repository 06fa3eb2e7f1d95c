#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
[[gnu::always_inline]] inline void softmax_tile_body(float* st, int iq, int ck, const int* lo, const int* hi, float* m,
                                                     float* l, float* acc, int hd) {
  using vec::v16;
  constexpr int kV = kBlockQ / vec::kLanes;
  v16 vm[kV], mnew[kV], msafe[kV], sum[kV];
  for (int v = 0; v < kV; ++v) vm[v] = vec::splat(kNegInf);
  for (int c = 0; c < ck; ++c) {
    float* row = st + static_cast<size_t>(c) * kBlockQ;
    const vec::i16 vlo = vec::i16{} + lo[c], vhi = vec::i16{} + hi[c];
    for (int v = 0; v < kV; ++v) {
      const vec::i16 idx = vec::iota() + v * vec::kLanes;
      const v16 x = (idx >= vlo) & (idx < vhi) ? vec::load(row + v * vec::kLanes) : vec::splat(kNegInf);
      vec::store(row + v * vec::kLanes, x);
      vm[v] = vec::max(vm[v], x);
    }
  }
  for (int v = 0; v < kV; ++v) {
    mnew[v] = vec::max(vec::load(m + v * vec::kLanes), vm[v]);
    // A query that has seen nothing yet keeps max −inf: shift by 0 so exp(−inf − 0) = 0, not NaN.
    msafe[v] = mnew[v] == vec::splat(kNegInf) ? v16{} : mnew[v];
    sum[v] = v16{};
  }
  for (int c = 0; c < ck; ++c) {
    float* row = st + static_cast<size_t>(c) * kBlockQ;
    for (int v = 0; v < kV; ++v) {
      const v16 p = vec::exp(vec::load(row + v * vec::kLanes) - msafe[v]);
      vec::store(row + v * vec::kLanes, p);
      sum[v] += p;
    }
  }
  float corr[kBlockQ];
  for (int v = 0; v < kV; ++v) {
    const v16 cv = vec::exp(vec::load(m + v * vec::kLanes) - msafe[v]);  // 0 while nothing was seen
    vec::store(corr + v * vec::kLanes, cv);
    vec::store(l + v * vec::kLanes, vec::load(l + v * vec::kLanes) * cv + sum[v]);
    vec::store(m + v * vec::kLanes, mnew[v]);
  }
  if (!acc) return;
  for (int i = 0; i < iq; ++i) {
    if (corr[i] == 1.0f) continue;
    float* ar = acc + static_cast<size_t>(i) * hd;
    int d = 0;
    for (; d + vec::kLanes <= hd; d += vec::kLanes) vec::store(ar + d, vec::load(ar + d) * corr[i]);
    for (; d < hd; ++d) ar[d] *= corr[i];
  }
}

using SoftmaxFn = void (*)(float*, int, int, const int*, const int*, float*, float*, float*, int);
void softmax_tile_default(float* s, int iq, int ck, const int* lo, const int* hi, float* m, float* l, float* acc,
                          int hd) {
  softmax_tile_body(s, iq, ck, lo, hi, m, l, acc, hd);
}
__attribute__((target("avx2,fma"))) void softmax_tile_avx2(float* s, int iq, int ck, const int* lo, const int* hi,
                                                           float* m, float* l, float* acc, int hd) {
  softmax_tile_body(s, iq, ck, lo, hi, m, l, acc, hd);
}
__attribute__((target("avx512f"))) void softmax_tile_avx512(float* s, int iq, int ck, const int* lo, const int* hi,
                                                            float* m, float* l, float* acc, int hd) {
  softmax_tile_body(s, iq, ck, lo, hi, m, l, acc, hd);
}

// The variant for the running CPU (vec::isa()).
void softmax_tile(float* s, int iq, int ck, const int* lo, const int* hi, float* m, float* l, float* acc, int hd) {
  static const SoftmaxFn fn = vec::pick<SoftmaxFn>(&softmax_tile_default, &softmax_tile_avx2, &softmax_tile_avx512);
  fn(s, iq, ck, lo, hi, m, l, acc, hd);
}

// x[i] = exp(x[i] − shift) for i < n; returns their sum (decode's softmax over all keys).
[[gnu::always_inline]] inline float exp_sum_body(float* x, int64_t n, float shift) {
  const vec::v16 vs = vec::splat(shift);
  vec::v16 acc{};
  int64_t i = 0;
  for (; i + vec::kLanes <= n; i += vec::kLanes) {
    const vec::v16 e = vec::exp(vec::load(x + i) - vs);
    vec::store(x + i, e);
    acc += e;
  }
  float sum = vec::hsum(acc);
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - shift);
  return sum;
}

using ExpSumFn = float (*)(float*, int64_t, float);
float exp_sum_default(float* x, int64_t n, float shift) { return exp_sum_body(x, n, shift); }
__attribute__((target("avx2,fma"))) float exp_sum_avx2(float* x, int64_t n, float shift) {
  return exp_sum_body(x, n, shift);
}
__attribute__((target("avx512f"))) float exp_sum_avx512(float* x, int64_t n, float shift) {
  return exp_sum_body(x, n, shift);
}

float exp_sum(float* x, int64_t n, float shift) {
  static const ExpSumFn fn = vec::pick<ExpSumFn>(&exp_sum_default, &exp_sum_avx2, &exp_sum_avx512);
  return fn(x, n, shift);
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
