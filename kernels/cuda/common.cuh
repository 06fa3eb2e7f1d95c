// Shared by the .cu files of this target only (never included by callers of ops.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/ops.h"

namespace yoco::cuda::detail {

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// The Status of the launch just made (launch-configuration errors; not later device faults).
inline Status launch_status(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error(std::string(op) + " launch: " + cudaGetErrorString(err));
  return Status::Ok();
}

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err != cudaSuccess) return internal_error(std::string(what) + ": " + cudaGetErrorString(err));
  return Status::Ok();
}

// bf16 is carried as uint16_t bit patterns through ops.h; math is always fp32.
__device__ __forceinline__ float load_f(const float* p) { return *p; }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_f(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

inline const __nv_bfloat16* as_bf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __nv_bfloat16* as_bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

// A device buffer of at least `bytes` that belongs to (current device, stream, slot) and is reused
// by later calls on that stream (kernels on one stream are ordered, so reuse is safe). Growing
// frees the old buffer (cudaFree synchronizes the device). slot separates users.
enum class ScratchSlot { kGemmWorkspace, kAttentionPartials, kSamplingKeys };
Result<void*> scratch(void* stream, ScratchSlot slot, size_t bytes);

}  // namespace yoco::cuda::detail
