#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/common.cuh"
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

namespace detail {
namespace {

struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

std::mutex g_scratch_mu;
// Never freed at exit on purpose: the driver may already be torn down by static destructors.
auto& g_scratch = *new std::map<std::tuple<int, void*, ScratchSlot>, Buffer>();

}  // namespace

Result<void*> scratch(void* stream, ScratchSlot slot, size_t bytes) {
  int dev = 0;
  if (Status st = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(g_scratch_mu);
  Buffer& b = g_scratch[{dev, stream, slot}];
  if (b.bytes >= bytes && b.ptr) return b.ptr;
  if (b.ptr) {
    if (Status st = cuda_status(cudaFree(b.ptr), "cudaFree(scratch)"); !st.ok()) return st;
    b = Buffer{};
  }
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kResourceExhausted, "scratch: cudaMalloc of " + std::to_string(bytes) + " bytes failed");
  }
  b = Buffer{p, bytes};
  return p;
}

}  // namespace detail

Status release_scratch(void* stream) {
  int dev = 0;
  if (Status st = detail::cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(detail::g_scratch_mu);
  Status result = Status::Ok();
  for (auto it = detail::g_scratch.begin(); it != detail::g_scratch.end();) {
    if (std::get<0>(it->first) == dev && std::get<1>(it->first) == stream) {
      if (it->second.ptr) {
        Status st = detail::cuda_status(cudaFree(it->second.ptr), "cudaFree(scratch)");
        if (!st.ok() && result.ok()) result = st;
      }
      it = detail::g_scratch.erase(it);
    } else {
      ++it;
    }
  }
  return result;
}

}  // namespace yoco::cuda
