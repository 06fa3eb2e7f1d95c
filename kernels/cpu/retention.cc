#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {

namespace {

// att[i, j] *= exp(b_i − b_j) for j <= i, 0 for j > i (i, j < c; rows of width ld).
template <typename V>
[[gnu::always_inline]] inline void decay_mask_body(float* att, int ld, const float* b, int c) {
  for (int i = 0; i < c; ++i) {
    float* row = att + static_cast<size_t>(i) * ld;
    const V bi = vec::splat<V>(b[i]);
    int j = 0;
    for (; j + vec::kLanes <= i + 1; j += vec::kLanes)
      vec::store(row + j, vec::load<V>(row + j) * vec::exp(bi - vec::load<V>(b + j)));
    for (; j <= i; ++j) row[j] *= std::exp(b[i] - b[j]);
    for (; j < c; ++j) row[j] = 0;
  }
}

using DecayMaskFn = void (*)(float*, int, const float*, int);
void decay_mask_default(float* att, int ld, const float* b, int c) { decay_mask_body<vec::F16Base>(att, ld, b, c); }
__attribute__((target("avx2,fma"))) void decay_mask_avx2(float* att, int ld, const float* b, int c) {
  decay_mask_body<vec::F16Avx2>(att, ld, b, c);
}
__attribute__((target("avx512f"))) void decay_mask_avx512(float* att, int ld, const float* b, int c) {
  decay_mask_body<vec::F16Avx512>(att, ld, b, c);
}

// The variant for the running CPU (vec::isa()).
void decay_mask(float* att, int ld, const float* b, int c) {
  static const DecayMaskFn fn = vec::pick<DecayMaskFn>(&decay_mask_default, &decay_mask_avx2, &decay_mask_avx512);
  fn(att, ld, b, c);
}

}  // namespace

void retention_recurrent(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                         int n, int hd, float* s, float* out, int ldo) {
  for (int t = 0; t < n; ++t) {
    const float* qt = q + static_cast<int64_t>(t) * ldq;
    const float* kt = k + static_cast<int64_t>(t) * ldk;
    const float* vt = v + static_cast<int64_t>(t) * ldv;
    float* ot = out + static_cast<int64_t>(t) * ldo;
    const float decay = std::exp(a[t]);
    for (int i = 0; i < hd; ++i) {
      float* si = s + static_cast<int64_t>(i) * hd;
      const float ki = kt[i];
      for (int j = 0; j < hd; ++j) si[j] = decay * si[j] + ki * vt[j];
    }
    for (int j = 0; j < hd; ++j) ot[j] = 0;
    for (int i = 0; i < hd; ++i) {
      const float* si = s + static_cast<int64_t>(i) * hd;
      const float qi = qt[i];
      for (int j = 0; j < hd; ++j) ot[j] += qi * si[j];
    }
  }
}

void retention_chunkwise(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                         int n, int hd, int chunk, float* s, float* out, int ldo) {
  const int C = std::max(1, chunk);
  std::vector<float> b(C), att(static_cast<size_t>(C) * C), qs(static_cast<size_t>(C) * hd),
      kst(static_cast<size_t>(hd) * C);
  for (int t0 = 0; t0 < n; t0 += C) {
    const int c = std::min(C, n - t0);
    const float* qc = q + static_cast<int64_t>(t0) * ldq;
    const float* kc = k + static_cast<int64_t>(t0) * ldk;
    const float* vc = v + static_cast<int64_t>(t0) * ldv;
    float* oc = out + static_cast<int64_t>(t0) * ldo;
    // b_i: cumulative log-decay inside the chunk; a ≤ 0 so every exp below is ≤ 1.
    float acc = 0;
    for (int i = 0; i < c; ++i) b[i] = acc += a[t0 + i];
    const float b_last = b[c - 1];

    // Inner: (Q Kᵀ ⊙ exp(b_i − b_j)[j ≤ i]) V.
    gemm_tile(c, c, hd, 1.0f, qc, ldq, kc, ldk, true, 0.0f, att.data(), C);
    decay_mask(att.data(), C, b.data(), c);
    gemm_tile(c, hd, c, 1.0f, att.data(), C, vc, ldv, false, 0.0f, oc, ldo);

    // Cross: (Q ⊙ exp(b_i)) S_prev.
    for (int i = 0; i < c; ++i) {
      const float e = std::exp(b[i]);
      for (int d = 0; d < hd; ++d) qs[static_cast<size_t>(i) * hd + d] = qc[static_cast<int64_t>(i) * ldq + d] * e;
    }
    gemm_tile(c, hd, hd, 1.0f, qs.data(), hd, s, hd, false, 1.0f, oc, ldo);

    // State: S = exp(b_C) S + Σ_j (k_j · exp(b_C − b_j))ᵀ v_j, with kᵀ laid out explicitly.
    for (int j = 0; j < c; ++j) {
      const float e = std::exp(b_last - b[j]);
      for (int d = 0; d < hd; ++d) kst[static_cast<size_t>(d) * C + j] = kc[static_cast<int64_t>(j) * ldk + d] * e;
    }
    const float e_last = std::exp(b_last);
    for (int i = 0; i < hd * hd; ++i) s[i] *= e_last;
    gemm_tile(hd, hd, c, 1.0f, kst.data(), C, vc, ldv, false, 1.0f, s, hd);
  }
}

void retention_parallel(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                        int n, int hd, const float* s, float* out, int ldo, float* s_out) {
  std::vector<double> prefix(n + 1, 0.0);  // prefix[t+1] = Σ_{r≤t} a_r
  for (int t = 0; t < n; ++t) prefix[t + 1] = prefix[t] + a[t];
  for (int t = 0; t < n; ++t) {
    const float* qt = q + static_cast<int64_t>(t) * ldq;
    std::vector<double> o(hd, 0.0);
    for (int u = 0; u <= t; ++u) {
      const float* ku = k + static_cast<int64_t>(u) * ldk;
      const float* vu = v + static_cast<int64_t>(u) * ldv;
      double dot = 0;
      for (int d = 0; d < hd; ++d) dot += static_cast<double>(qt[d]) * ku[d];
      const double w = std::exp(prefix[t + 1] - prefix[u + 1]) * dot;
      for (int d = 0; d < hd; ++d) o[d] += w * vu[d];
    }
    if (s) {
      const double e = std::exp(prefix[t + 1]);
      for (int i = 0; i < hd; ++i)
        for (int j = 0; j < hd; ++j) o[j] += e * qt[i] * s[static_cast<int64_t>(i) * hd + j];
    }
    for (int d = 0; d < hd; ++d) out[static_cast<int64_t>(t) * ldo + d] = static_cast<float>(o[d]);
  }
  if (s_out) {
    std::vector<double> st(static_cast<size_t>(hd) * hd, 0.0);
    if (s)
      for (int i = 0; i < hd * hd; ++i) st[i] = std::exp(prefix[n]) * s[i];
    for (int u = 0; u < n; ++u) {
      const double w = std::exp(prefix[n] - prefix[u + 1]);
      for (int i = 0; i < hd; ++i)
        for (int j = 0; j < hd; ++j)
          st[static_cast<size_t>(i) * hd + j] +=
              w * k[static_cast<int64_t>(u) * ldk + i] * v[static_cast<int64_t>(u) * ldv + j];
    }
    for (int i = 0; i < hd * hd; ++i) s_out[i] = static_cast<float>(st[i]);
  }
}

}  // namespace yoco::cpu
