#include <cmath>

#include "kernels/cpu/ops.h"

namespace yoco::cpu {

void rmsnorm(const float* x, int ldx, const float* w, float* y, int ldy, int rows, int dim, float eps) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * dim > (1 << 15))
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * ldx;
    float* yr = y + static_cast<int64_t>(r) * ldy;
    float ss = 0;
    for (int i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    if (w) {
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
    } else {
      for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
    }
  }
}

}  // namespace yoco::cpu
