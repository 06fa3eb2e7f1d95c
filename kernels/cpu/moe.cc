// The routing of a mixture-of-experts FFN (docs/design.md §2.2); the experts' products are the
// model's (model/moe_cpu.cc), over the same GEMMs as every other projection.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace yoco::cpu {

void moe_route(const float* logits, int rows, int n_experts, int k, bool norm_topk, float* probs, int32_t* experts,
               float* weights) {
  const int E = n_experts;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * E * k > (1 << 16))
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + static_cast<int64_t>(r) * E;
    float* p = probs + static_cast<int64_t>(r) * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    const float inv = 1.0f / sum;
    for (int e = 0; e < E; ++e) p[e] *= inv;
    int32_t* ids = experts + static_cast<int64_t>(r) * k;
    float* w = weights + static_cast<int64_t>(r) * k;
    uint64_t taken[4] = {0, 0, 0, 0};  // E ≤ 256 in a bitmask would do; larger E falls back below
    std::vector<char> taken_big;
    if (E > 256) taken_big.assign(E, 0);
    auto is_taken = [&](int e) { return E > 256 ? taken_big[e] != 0 : ((taken[e >> 6] >> (e & 63)) & 1) != 0; };
    float chosen = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (!is_taken(e) && (best < 0 || p[e] > p[best])) best = e;  // strict: ties keep the lower index
      if (E > 256) taken_big[best] = 1;
      else taken[best >> 6] |= uint64_t{1} << (best & 63);
      ids[j] = best;
      w[j] = p[best];
      chosen += p[best];
    }
    if (norm_topk)
      for (int j = 0; j < k; ++j) w[j] /= chosen;
  }
}

}  // namespace yoco::cpu
