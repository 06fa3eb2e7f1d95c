#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

using detail::load_f;
using detail::store_f;

// One thread per (row, head, pair). The frequency, angle, cos and sin are computed in double,
// exactly as cpu::rope_table, so the tables agree with the CPU's to the float rounding. Later: a
// per-launch fp64 inv-frequency table in shared memory, or fp32 sincos with range reduction in
// double, once a benchmark shows fp64 as the cost (decode rows are few).
template <class T>
__global__ void rope_kernel(T* x, int ld, int rows, int n_heads, int half, const int64_t* __restrict__ positions,
                            double theta, double denom) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(rows) * n_heads * half;
  if (idx >= total) return;
  const int j = static_cast<int>(idx % half);
  const int64_t rh = idx / half;
  const int h = static_cast<int>(rh % n_heads);
  const int r = static_cast<int>(rh / n_heads);
  const double f = pow(theta, -static_cast<double>(j) / denom);
  const double ang = static_cast<double>(positions[r]) * f;
  double sd, cd;
  sincos(ang, &sd, &cd);
  const float c = static_cast<float>(cd), s = static_cast<float>(sd);
  T* xp = x + static_cast<int64_t>(r) * ld + static_cast<int64_t>(h) * (2 * half) + 2 * j;
  const float x0 = load_f(xp), x1 = load_f(xp + 1);
  store_f(xp, x0 * c - x1 * s);
  store_f(xp + 1, x0 * s + x1 * c);
}

template <class T>
Status launch(const char* op, T* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions, double theta,
              void* stream) {
  const std::string o(op);
  if (rows < 0) return invalid_argument(o + ": rows must be >= 0");
  if (n_heads <= 0) return invalid_argument(o + ": n_heads must be > 0");
  if (head_dim <= 0 || head_dim % 2 != 0) return invalid_argument(o + ": head_dim must be even and > 0");
  if (ld < n_heads * head_dim) return invalid_argument(o + ": ld must be >= n_heads * head_dim");
  if (!(theta > 0)) return invalid_argument(o + ": theta must be > 0");
  if (rows == 0) return Status::Ok();
  if (!x) return invalid_argument(o + ": x is null");
  if (!positions) return invalid_argument(o + ": positions is null");
  const int half = head_dim / 2;
  const double denom = half > 1 ? static_cast<double>(half - 1) : 1.0;  // docs/design.md §2.2: note the half - 1
  const int64_t total = static_cast<int64_t>(rows) * n_heads * half;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return invalid_argument(o + ": too many elements");
  rope_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, detail::as_stream(stream)>>>(x, ld, rows, n_heads, half,
                                                                                            positions, theta, denom);
  return detail::launch_status(op);
}

}  // namespace

Status rope_interleaved(float* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions, double theta,
                        void* stream) {
  return launch("rope_interleaved", x, ld, rows, n_heads, head_dim, positions, theta, stream);
}

Status rope_interleaved_bf16(uint16_t* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions,
                             double theta, void* stream) {
  return launch("rope_interleaved_bf16", detail::as_bf16(x), ld, rows, n_heads, head_dim, positions, theta, stream);
}

}  // namespace yoco::cuda
