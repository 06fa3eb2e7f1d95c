// Stage-by-stage comparison of the layer program's named intermediates (model/trace.h) with the
// float64 reference's (tests/reference/goldens/<config>/intermediates.safetensors, [n, values] per
// name for the golden tokens), shared by the CPU test (tests/unit/intermediates_test.cc) and the
// CUDA one (tests/gpu/cuda_intermediates_test.cc). A run is collected by name and position, so a
// prefill in chunks plus decode steps lines up with the reference's full forward row by row; the
// report lists every stage in program order, and the first one over its bound is where the
// backends part.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "model/trace.h"

namespace yoco::test {

struct NamedRows {
  int cols = 0;
  std::map<int64_t, std::vector<float>> rows;  // by position
};

class TraceCollector {
 public:
  TraceSink sink() {
    return [this](const TraceRows& t) {
      const std::string name(t.name);
      auto [it, fresh] = got_.try_emplace(name);
      if (fresh) order_.push_back(name);
      it->second.cols = t.cols;
      for (int r = 0; r < t.rows; ++r)
        it->second.rows[t.positions[r]].assign(t.data + static_cast<size_t>(r) * t.cols,
                                               t.data + static_cast<size_t>(r + 1) * t.cols);
    };
  }
  const std::map<std::string, NamedRows>& got() const { return got_; }
  const std::vector<std::string>& order() const { return order_; }  // first appearance

 private:
  std::map<std::string, NamedRows> got_;
  std::vector<std::string> order_;
};

struct RefTensor {
  int rows = 0, cols = 0;
  std::vector<float> data;
};

inline std::map<std::string, RefTensor> load_intermediates(const std::string& path) {
  std::map<std::string, RefTensor> out;
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return out;
  for (const TensorInfo& t : (*f)->header().tensors) {
    RefTensor r;
    r.rows = static_cast<int>(t.shape.at(0));
    r.cols = static_cast<int>(t.numel() / std::max<int64_t>(1, r.rows));
    r.data.resize(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(convert_to_f32(t.dtype, (*f)->tensor_data(t), t.numel(), r.data.data()).ok()) << t.name;
    out.emplace(t.name, std::move(r));
  }
  return out;
}

// Another run's intermediates as the reference (e.g. the CPU backend's for the CUDA one): rows
// 0..last position of each name, zero where that run left a position out.
inline std::map<std::string, RefTensor> as_reference(const TraceCollector& run) {
  std::map<std::string, RefTensor> out;
  for (const auto& [name, got] : run.got()) {
    RefTensor r;
    r.rows = got.rows.empty() ? 0 : static_cast<int>(got.rows.rbegin()->first + 1);
    r.cols = got.cols;
    r.data.assign(static_cast<size_t>(r.rows) * r.cols, 0.0f);
    for (const auto& [pos, values] : got.rows)
      std::copy(values.begin(), values.end(), r.data.begin() + static_cast<ptrdiff_t>(pos) * r.cols);
    out.emplace(name, std::move(r));
  }
  return out;
}

// Per stage: the rows a run produced against the reference's rows at the same positions.
//   elementwise: worst |x − ref| / (atol_scale · max|ref| + rtol · |ref|) (≤ 1 passes);
//   relative L2: ‖x − ref‖₂ / ‖ref‖₂ (≤ l2_bound passes; off when l2_bound ≤ 0).
struct StageBound {
  double atol_scale = 0, rtol = 0;  // elementwise; off when both are 0
  double l2_bound = 0;
};

// Checks every collected stage (and, with every_name, that the run named exactly the reference's
// stages); prints one line per stage in program order and fails naming the first stage over its
// bound.
inline ::testing::AssertionResult stages_match(const TraceCollector& run, const std::map<std::string, RefTensor>& ref,
                                               const StageBound& bound, bool every_name) {
  std::string first_bad, missing;
  int compared = 0;
  if (every_name)
    for (const auto& [name, _] : ref)
      if (!run.got().count(name)) missing += " " + name;
  for (const std::string& name : run.order()) {
    const NamedRows& got = run.got().at(name);
    auto it = ref.find(name);
    if (it == ref.end()) {
      if (every_name) missing += " (not in the reference) " + name;
      continue;
    }
    const RefTensor& r = it->second;
    if (r.cols != got.cols)
      return ::testing::AssertionFailure() << name << ": " << got.cols << " values per row, reference " << r.cols;
    double scale = 0;
    for (float v : r.data) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    double worst = 0, num = 0, den = 0;
    for (const auto& [pos, values] : got.rows) {
      if (pos < 0 || pos >= r.rows)
        return ::testing::AssertionFailure() << name << ": position " << pos << " past the reference";
      const float* want = r.data.data() + static_cast<size_t>(pos) * r.cols;
      for (int i = 0; i < r.cols; ++i) {
        const double d = std::fabs(static_cast<double>(values[i]) - want[i]);
        const double b = bound.atol_scale * scale + bound.rtol * std::fabs(static_cast<double>(want[i]));
        if (b > 0) worst = std::max(worst, std::isnan(d) ? INFINITY : d / b);
        num += d * d;
        den += static_cast<double>(want[i]) * want[i];
      }
    }
    const double l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool bad = !(worst <= 1.0) || (bound.l2_bound > 0 && !(l2 <= bound.l2_bound));
    std::printf("  %-26s rows %3zu  max|ref| %.3e  worst/bound %7.4f  rel L2 %.3e%s\n", name.c_str(), got.rows.size(),
                scale, worst, l2, bad ? "  <-- over" : "");
    if (bad && first_bad.empty()) first_bad = name;
    ++compared;
  }
  if (!missing.empty()) return ::testing::AssertionFailure() << "stages not compared:" << missing;
  if (!first_bad.empty()) return ::testing::AssertionFailure() << "first stage over its bound: " << first_bad;
  return ::testing::AssertionSuccess() << compared << " stages within bounds";
}

}  // namespace yoco::test
