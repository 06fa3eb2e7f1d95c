// The bf16 compute path's kernels (kernels/cpu/matmul.h).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {

namespace {

inline bf16 round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}

using vec::widen;

// Conversions of whole activations (thousands of rows in a prefill) use every thread: on one,
// they left the others waiting between the products.
constexpr int64_t kParallelElements = int64_t{1} << 16;

// Rows of x in bf16 (hi) and, with split, what that rounding left out, itself in bf16 (lo;
// x ≈ hi + lo to ~16 significant bits): one pass over x, buffers reused on the calling thread.
std::pair<const bf16*, const bf16*> rounded_rows(const float* x, int64_t n, bool split) {
  thread_local std::vector<bf16> hi, lo;
  if (static_cast<int64_t>(hi.size()) < n) hi.resize(n);
  if (split && static_cast<int64_t>(lo.size()) < n) lo.resize(n);
  bf16* h = hi.data();
  bf16* l = lo.data();
  if (split) {
#pragma omp parallel for simd schedule(static) if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      h[i] = round_bf16(x[i]);
      l[i] = round_bf16(x[i] - widen(h[i]));
    }
  } else {
    to_bf16(x, h, n);
  }
  return {h, split ? l : nullptr};
}

// Rows up to which the plain loop beats oneDNN's bf16 matmul (bench/gemm_roof.cc).
constexpr int kBf16LibraryMinRows = 8;
// Outputs below which rounding x costs more than the product (engine_bench mid-gret bf16 prefill).
constexpr int kBf16LibraryMinCols = 64;

}  // namespace

void to_bf16(const float* x, bf16* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] = round_bf16(x[i]);
}

void from_bf16(const bf16* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] = widen(x[i]);
}

bool linear_bf16_rounds_x(int m, int n, bool split_x) {
  // A split product calls the library twice: up to kSmallM rows the small-m kernel, reading W
  // once with x in fp32, is the faster of the two (bench/README.md, decode batches of 8-15).
  // A matrix of few rows (gated retention's gate: one per head) is cheaper to multiply in place
  // than x is to round.
  return m >= (split_x ? kSmallM : kBf16LibraryMinRows) && n >= kBf16LibraryMinCols && dnnl_bf16_supported();
}

bool linear_bf16_widens() { return !dnnl_bf16_supported(); }

int linear_bf16_panel_rows(int m, int n, int k) {
  const int64_t bytes = m >= kBf16WideRows ? kBf16WidePanelBytes : kBf16PanelBytes;
  const int64_t fit = bytes / (4 * static_cast<int64_t>(std::max(k, 1)));
  return static_cast<int>(std::clamp<int64_t>(fit / 16 * 16, std::min(16, n), std::max(n, 1)));
}

void linear_bf16_widened(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const int panel = linear_bf16_panel_rows(m, n, k);
  thread_local std::vector<float> wide;
  if (static_cast<int64_t>(wide.size()) < static_cast<int64_t>(panel) * k) wide.resize(static_cast<size_t>(panel) * k);
  for (int j0 = 0; j0 < n; j0 += panel) {
    const int rows = std::min(panel, n - j0);
    from_bf16(w + static_cast<int64_t>(j0) * k, wide.data(), static_cast<int64_t>(rows) * k);
    gemm(m, rows, k, 1.0f, x, k, wide.data(), k, true, accumulate ? 1.0f : 0.0f, y + j0, n);
  }
}

void linear_bf16(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate, bool split_x) {
  if (m <= 0 || n <= 0) return;
  const int64_t len = static_cast<int64_t>(m) * k;
  if (linear_bf16_rounds_x(m, n, split_x)) {
    const auto [hi, lo] = rounded_rows(x, len, split_x);
    if (gemm_dnnl_bf16(m, n, k, hi, k, w, k, accumulate ? 1.0f : 0.0f, y, n)) {
      if (split_x) gemm_dnnl_bf16(m, n, k, lo, k, w, k, 1.0f, y, n);
      return;
    }
  }
  // No bf16 matmul on this CPU: a prefill chunk multiplies widened panels through the fp32
  // kernel (the small-m loop would read W once per four rows of x: 10× slower than fp32).
  if (m > kSmallM && linear_bf16_widens()) return linear_bf16_widened(x, w, y, m, n, k, accumulate);
  // Few rows (a decode step): bound by reading W, so x stays fp32, which keeps its rounding error
  // out of the products, and W is read once for all m rows (gemv.cc).
  gemm_small_m_bf16(m, n, k, x, w, y, accumulate);
}

void linear_bf16_reference(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate,
                           bool split_x) {
  const bool round_x = linear_bf16_rounds_x(m, n, split_x);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p) {
        const float xv = x[static_cast<int64_t>(i) * k + p];
        const float hi = widen(round_bf16(xv));
        const float xr = !round_x ? xv : split_x ? hi + widen(round_bf16(xv - hi)) : hi;
        s += xr * widen(w[static_cast<int64_t>(j) * k + p]);
      }
      float& out = y[static_cast<int64_t>(i) * n + j];
      out = accumulate ? out + s : s;
    }
}

void embed_bf16(const bf16* table, int dim, const int32_t* ids, int n, float scale, float* out) {
  for (int i = 0; i < n; ++i) {
    const bf16* row = table + static_cast<int64_t>(ids[i]) * dim;
    float* o = out + static_cast<int64_t>(i) * dim;
#pragma omp simd
    for (int d = 0; d < dim; ++d) o[d] = scale * widen(row[d]);
  }
}

}  // namespace yoco::cpu
