#include <cuda_runtime.h>

#include "kernels/cuda/ops.h"

namespace yoco::cuda {
namespace {

// One block per row; the sum of squares is reduced in fp32 across the block.
template <int kThreads>
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               int dim, float eps) {
  const int row = blockIdx.x;
  const float* xr = x + static_cast<int64_t>(row) * dim;
  float* yr = y + static_cast<int64_t>(row) * dim;
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += kThreads) ss += xr[i] * xr[i];
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
  for (int i = threadIdx.x; i < dim; i += kThreads) yr[i] = xr[i] * inv * (w ? w[i] : 1.f);
}

}  // namespace

Status rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, void* stream) {
  if (rows <= 0 || dim <= 0) return invalid_argument("rmsnorm: rows and dim must be > 0");
  rmsnorm_kernel<256><<<rows, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, w, y, dim, eps);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error(std::string("rmsnorm launch: ") + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace yoco::cuda
