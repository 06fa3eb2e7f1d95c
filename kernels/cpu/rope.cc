#include <cmath>

#include "kernels/cpu/ops.h"

namespace yoco::cpu {

void rope_table(const int64_t* positions, int rows, int head_dim, double theta, float* cos_out, float* sin_out) {
  const int half = head_dim / 2;
  // docs/design.md §2.2: exponents evenly spaced from 0 to 1 inclusive, hence half - 1 in the denominator.
  const double denom = half > 1 ? static_cast<double>(half - 1) : 1.0;
  for (int r = 0; r < rows; ++r) {
    const double p = static_cast<double>(positions[r]);
    for (int j = 0; j < half; ++j) {
      const double f = std::pow(theta, -static_cast<double>(j) / denom);
      const double ang = p * f;
      cos_out[static_cast<int64_t>(r) * half + j] = static_cast<float>(std::cos(ang));
      sin_out[static_cast<int64_t>(r) * half + j] = static_cast<float>(std::sin(ang));
    }
  }
}

void rope_apply(float* x, int ld, int rows, int n_heads, int head_dim, const float* cos_t, const float* sin_t) {
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * n_heads * head_dim > (1 << 15))
  for (int r = 0; r < rows; ++r) {
    const float* c = cos_t + static_cast<int64_t>(r) * half;
    const float* s = sin_t + static_cast<int64_t>(r) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + static_cast<int64_t>(r) * ld + static_cast<int64_t>(h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const float x0 = xh[2 * j], x1 = xh[2 * j + 1];
        xh[2 * j] = x0 * c[j] - x1 * s[j];
        xh[2 * j + 1] = x0 * s[j] + x1 * c[j];
      }
    }
  }
}

}  // namespace yoco::cpu
