#include "kernels/cuda/common.cuh"

namespace yoco::cuda {
namespace {

using detail::load_f;
using detail::store_f;

// One block per row; the sum of squares is reduced in fp32 across the block. T is the storage type
// of x and y (float or bf16); statistics and the scaling are fp32. Later: vectorized loads and a
// warp per row when dim is small (the per-head gRet norm, dim = hd).
template <int kThreads, class TIn, class TOut>
__global__ void rmsnorm_kernel(const TIn* x, const float* __restrict__ w, TOut* y, int dim, float eps) {  // y may be x
  const int row = blockIdx.x;
  const TIn* xr = x + static_cast<int64_t>(row) * dim;
  TOut* yr = y + static_cast<int64_t>(row) * dim;
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = load_f(xr + i);
    ss += v * v;
  }
  __shared__ float warp_sums[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    ss = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x == 0) warp_sums[0] = ss;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_sums[0] / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads) store_f(yr + i, load_f(xr + i) * inv * (w ? w[i] : 1.f));
}

template <class TIn, class TOut>
Status launch(const char* op, const TIn* x, const float* w, TOut* y, int rows, int dim, float eps, void* stream) {
  if (rows < 0) return invalid_argument(std::string(op) + ": rows must be >= 0");
  if (dim <= 0) return invalid_argument(std::string(op) + ": dim must be > 0");
  if (rows == 0) return Status::Ok();
  if (!x) return invalid_argument(std::string(op) + ": x is null");
  if (!y) return invalid_argument(std::string(op) + ": y is null");
  rmsnorm_kernel<256, TIn, TOut><<<rows, 256, 0, detail::as_stream(stream)>>>(x, w, y, dim, eps);
  return detail::launch_status(op);
}

}  // namespace

Status rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, void* stream) {
  return launch("rmsnorm", x, w, y, rows, dim, eps, stream);
}

Status rmsnorm_bf16(const uint16_t* x, const float* w, uint16_t* y, int rows, int dim, float eps, void* stream) {
  return launch("rmsnorm_bf16", detail::as_bf16(x), w, detail::as_bf16(y), rows, dim, eps, stream);
}

Status rmsnorm_to_bf16(const float* x, const float* w, uint16_t* y, int rows, int dim, float eps, void* stream) {
  return launch("rmsnorm_to_bf16", x, w, detail::as_bf16(y), rows, dim, eps, stream);
}

}  // namespace yoco::cuda
