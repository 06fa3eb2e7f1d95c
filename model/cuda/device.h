// The CUDA engine's device plumbing (model/cuda/cuda_engine.h): CUDA errors and kernel statuses as
// the engine's Status, and an owned device allocation. Private to yoco_engine_cuda: includes CUDA
// headers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/status.h"
#include "kernels/cuda/status.h"

namespace yoco::cuda_engine {

inline Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  return internal_error(std::string("cuda engine: ") + what + ": " + cudaGetErrorString(err));
}

// A kernel's status as the engine's: kernels/cuda/status.h keeps common/status.h's codes.
inline Status to_status(const cuda::Status& s) {
  return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.code()), s.message());
}
static_assert(static_cast<int>(cuda::StatusCode::kOk) == static_cast<int>(StatusCode::kOk));
static_assert(static_cast<int>(cuda::StatusCode::kInvalidArgument) == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(static_cast<int>(cuda::StatusCode::kResourceExhausted) ==
              static_cast<int>(StatusCode::kResourceExhausted));
static_assert(static_cast<int>(cuda::StatusCode::kUnimplemented) == static_cast<int>(StatusCode::kUnimplemented));
static_assert(static_cast<int>(cuda::StatusCode::kInternal) == static_cast<int>(StatusCode::kInternal));

// One device allocation, freed on destruction.
class DeviceMem {
 public:
  DeviceMem() = default;
  ~DeviceMem() {
    if (p_) cudaFree(p_);
  }
  DeviceMem(DeviceMem&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMem& operator=(DeviceMem&&) = delete;
  DeviceMem(const DeviceMem&) = delete;

  // Zeroed on `stream`: everything the engine does is ordered on its one (non-blocking) stream,
  // which does not wait for the legacy default stream.
  Status alloc(size_t bytes, const char* what, cudaStream_t stream) {
    YOCO_CHECK(!p_);
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 16)) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      return Status(StatusCode::kResourceExhausted, std::string("cuda engine: cudaMalloc of ") + std::to_string(bytes) +
                                                        " bytes for " + what + " failed");
    }
    bytes_ = bytes;
    return cuda_check(cudaMemsetAsync(p_, 0, std::max<size_t>(bytes, 16), stream), what);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Host bytes up on `stream`. Pageable source: the runtime stages it before returning, so `src`
// may be reused at once.
inline Status copy_up(void* dst, const void* src, size_t bytes, const char* what, cudaStream_t stream) {
  return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), what);
}

}  // namespace yoco::cuda_engine

// YOCO_RETURN_IF_ERROR for a kernel call (kernels/cuda/ops.h returns cuda::Status).
#define YOCO_RETURN_IF_KERNEL_ERROR(expr) YOCO_RETURN_IF_ERROR(::yoco::cuda_engine::to_status(expr))
