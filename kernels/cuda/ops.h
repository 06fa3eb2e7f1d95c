// The CUDA backend's interface. Plain C++: callers never see CUDA headers. Every function
// returns a Status; device pointers are passed as void*/float* and streams as void*.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace yoco::cuda {

// Number of usable CUDA devices (0 when there is no driver or no device).
int device_count();

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w (w may be null), fp32 on the device.
Status rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, void* stream);

}  // namespace yoco::cuda
