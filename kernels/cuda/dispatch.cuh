// The one place a runtime head dim becomes a template parameter, for every kernel that tiles by
// head dim (causal_attention_prefill, retention_prefill, swa_prefill). Included by this target's
// .cu files only.
#pragma once

#include <string>
#include <type_traits>

#include "kernels/cuda/ops.h"

namespace yoco::cuda::detail {

constexpr int kMaxTiledHeadDim = 256;

// Calls f(std::integral_constant<int, HD>{}) with HD the smallest of 32, 64, 128, 256 that holds
// `head_dim` (the tiles pad up to it) and returns f's Status. A head dim outside
// 1..kMaxTiledHeadDim is INVALID_ARGUMENT naming `op`, never a launch.
template <class F>
Status dispatch_head_dim(const char* op, int head_dim, F&& f) {
  if (head_dim <= 0 || head_dim > kMaxTiledHeadDim)
    return invalid_argument(std::string(op) + ": head_dim " + std::to_string(head_dim) + " is not supported (1.." +
                            std::to_string(kMaxTiledHeadDim) + ")");
  if (head_dim <= 32) return f(std::integral_constant<int, 32>{});
  if (head_dim <= 64) return f(std::integral_constant<int, 64>{});
  if (head_dim <= 128) return f(std::integral_constant<int, 128>{});
  return f(std::integral_constant<int, 256>{});
}

}  // namespace yoco::cuda::detail
