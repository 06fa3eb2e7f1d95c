#include <cuda_runtime.h>

#include "kernels/cuda/ops.h"

namespace yoco::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace yoco::cuda
