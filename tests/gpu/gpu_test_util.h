// Helpers shared by the GPU test binaries (the one place for them): device buffers, bf16
// conversion and rounding on the host, the |got − ref| ≤ atol + rtol·|ref| comparison (STYLE
// item 4) and the bf16 tolerance, bitwise equality, and the skip without a device.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "handoff/kv_rows.h"
#include "kernels/cuda/ops.h"

namespace yoco {

#define SKIP_WITHOUT_GPU() \
  if (yoco::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())
// Takes a yoco::Status or a kernel's cuda::Status.
#define ASSERT_OK(expr)                       \
  do {                                        \
    const auto _st = (expr);                  \
    ASSERT_TRUE(_st.ok()) << _st.to_string(); \
  } while (0)

// --- host helpers ------------------------------------------------------------------------------------
// The project's one rounding (handoff/kv_rows.h): nearest even, NaN stays NaN.
inline uint16_t to_bf16(float f) { return f32_to_bf16(f); }
inline float from_bf16(uint16_t h) { return bf16_to_f32(h); }
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = to_bf16(x[i]);
  return r;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = from_bf16(x[i]);
  return r;
}

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of a host vector, freed on scope exit.
template <class T>
class DeviceBuf {
 public:
  explicit DeviceBuf(size_t n) : n_(n) {
    if (cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  explicit DeviceBuf(const std::vector<T>& h) : DeviceBuf(h.size()) {
    if (p_ && !h.empty()) cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuf() {
    if (p_) cudaFree(p_);
  }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    cudaDeviceSynchronize();
    if (p_ && n_) cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Counts the elements outside atol + rtol·|ref| and reports the worst one.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                                            float rtol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = atol + rtol * std::fabs(static_cast<double>(ref[i]));
    if (!(err <= tol)) {  // NaN counts as bad
      ++bad;
      if (!(err - tol <= worst_excess)) {
        worst_excess = std::isnan(err) ? 1e30 : err - tol;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements off; worst at " << worst << ": got "
                                       << got[worst] << ", want " << ref[worst] << " (atol " << atol << ", rtol "
                                       << rtol << ")";
}

inline double rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return x.empty() ? 0.0 : std::sqrt(s / static_cast<double>(x.size()));
}

// The tensor-core tolerance of the bf16 ops: rtol 2e-2 with an atol of 2e-2 of the reference's
// RMS (sums cancel: an element can be far below the RMS).
inline ::testing::AssertionResult bf16_close(const std::vector<float>& got, const std::vector<float>& ref) {
  return all_close(got, ref, static_cast<float>(2e-2 * rms(ref)) + 1e-6f, 2e-2f);
}

// Every element rounded to bf16 (nearest even) and back.
inline std::vector<float> bf16_round(std::vector<float> x) {
  for (auto& v : x) v = from_bf16(to_bf16(v));
  return x;
}

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline float logsigmoid(float x) { return std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))); }

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace yoco
