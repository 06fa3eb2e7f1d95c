#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"

namespace yoco::cpu {
namespace {

constexpr int kBlockQ = 64;
constexpr int kBlockK = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Key columns [lo, hi) of the whole run that some query of the block can see.
void visible_key_range(const AttentionArgs& a, int i0, int iq, int& lo, int& hi) {
  const int64_t p_first = a.q_pos0 + i0, p_last = a.q_pos0 + i0 + iq - 1;
  int64_t c_lo = a.window > 0 ? p_first - a.window + 1 - a.k_pos0 : 0;
  int64_t c_hi = p_last - a.k_pos0 + 1;
  lo = static_cast<int>(std::clamp<int64_t>(c_lo, 0, a.n_k));
  hi = static_cast<int>(std::clamp<int64_t>(c_hi, 0, a.n_k));
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
    // then accumulate P·V, so memory stays O(block) whatever the sequence length.
    std::vector<float> s(static_cast<size_t>(kBlockQ) * kBlockK), acc(static_cast<size_t>(kBlockQ) * hd);
    std::vector<float> m(kBlockQ), l(kBlockQ);
#pragma omp for schedule(dynamic)
    for (int task = 0; task < n_tasks; ++task) {
      const int h = task / n_qb, qb = task % n_qb;
      const int kvh = h / group;
      const int i0 = qb * kBlockQ, iq = std::min(kBlockQ, a.n_q - i0);
      const float* q = a.q + static_cast<int64_t>(i0) * a.ldq + static_cast<int64_t>(h) * hd;
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      int lo, hi;
      visible_key_range(a, i0, iq, lo, hi);
      for (int c0 = lo; c0 < hi; c0 += kBlockK) {
        const int ck = std::min(kBlockK, hi - c0);
        const float* k = a.k + static_cast<int64_t>(c0) * a.ldk + static_cast<int64_t>(kvh) * hd;
        const float* v = a.v + static_cast<int64_t>(c0) * a.ldv + static_cast<int64_t>(kvh) * hd;
        gemm(iq, ck, hd, a.scale, q, a.ldq, k, a.ldk, true, 0.0f, s.data(), kBlockK);
        for (int r = 0; r < iq; ++r) {
          float* sr = s.data() + static_cast<size_t>(r) * kBlockK;
          const int64_t qp = a.q_pos0 + i0 + r;
          float mx = m[r];
          for (int c = 0; c < ck; ++c) {
            const int64_t kp = a.k_pos0 + c0 + c;
            if (kp > qp || (a.window > 0 && kp <= qp - a.window)) sr[c] = kNegInf;
            mx = std::max(mx, sr[c]);
          }
          if (mx == kNegInf) {  // nothing visible yet for this row
            std::fill(sr, sr + ck, 0.0f);
            continue;
          }
          const float corr = std::exp(m[r] - mx);
          float sum = 0;
          for (int c = 0; c < ck; ++c) {
            sr[c] = std::exp(sr[c] - mx);
            sum += sr[c];
          }
          l[r] = l[r] * corr + sum;
          if (corr != 1.0f) {
            float* ar = acc.data() + static_cast<size_t>(r) * hd;
            for (int d = 0; d < hd; ++d) ar[d] *= corr;
          }
          m[r] = mx;
        }
        gemm(iq, hd, ck, 1.0f, s.data(), kBlockK, v, a.ldv, false, 1.0f, acc.data(), hd);
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
    std::vector<float> s(static_cast<size_t>(group) * n);
    for (int64_t b = 0; b < n_blocks; ++b)
      gemm(group, rows_of[b], hd, scale, qg, hd, kv.k_blocks[b] + static_cast<int64_t>(kvh) * hd, kv_dim, true, 0.0f,
           s.data() + start_of[b], static_cast<int>(n));
    for (int g = 0; g < group; ++g) {
      float* sr = s.data() + static_cast<size_t>(g) * n;
      float mx = kNegInf;
      for (int64_t c = 0; c < n; ++c) mx = std::max(mx, sr[c]);
      float sum = 0;
      for (int64_t c = 0; c < n; ++c) {
        sr[c] = std::exp(sr[c] - mx);
        sum += sr[c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < n; ++c) sr[c] *= inv;
    }
    float* og = out + static_cast<int64_t>(kvh) * group * hd;
    for (int i = 0; i < group * hd; ++i) og[i] = 0;
    for (int64_t b = 0; b < n_blocks; ++b)
      gemm(group, hd, rows_of[b], 1.0f, s.data() + start_of[b], static_cast<int>(n),
           kv.v_blocks[b] + static_cast<int64_t>(kvh) * hd, kv_dim, false, 1.0f, og, hd);
  }
}

}  // namespace yoco::cpu
