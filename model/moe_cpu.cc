#include "model/moe_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/model.h"

namespace yoco {

namespace {

// An expert's assignments (row · k + slot) in one product; large groups are split so that
// threads share an expert's rows.
struct Item {
  int expert, first, count;
};
constexpr int kBlockRows = 128;

// The library GEMM compiles a kernel per exact shape (kernels/cpu/gemm_dnnl.cc), and an expert's
// row count changes with every chunk: products of kLibraryMinRows rows and more are padded with
// zero rows to a multiple of 16, so a model needs a handful of shapes per product, not one per
// row count. The padding rows' outputs are dropped.
int padded_rows(int rows) { return rows >= cpu::kLibraryMinRows ? (rows + 15) / 16 * 16 : rows; }

// o += wt · y over dim values: the one place a row's expert outputs are summed, in slot order.
inline void accumulate(float* o, float wt, const float* y, int dim) {
  for (int i = 0; i < dim; ++i) o[i] += wt * y[i];
}

}  // namespace

void MoeCpu::expert_rows(const Model& m, const ExpertWeights& e, int hidden, const float* xs, int n, float* y) {
  const int dim = m.config().dim;
  thread_local std::vector<float> u, act;
  u.resize(static_cast<size_t>(n) * 2 * hidden);
  act.resize(static_cast<size_t>(n) * hidden);
  m.linear(xs, e.w13, u.data(), n, 2 * hidden, dim);
  cpu::silu_mul(u.data(), 2 * hidden, u.data() + hidden, 2 * hidden, act.data(), hidden, n, hidden);
  m.linear(act.data(), e.w2, y, n, dim, hidden);
}

void MoeCpu::grouped(const Model& m, const MoeWeights& w, int hidden, const float* x, int rows, int k,
                     const int32_t* experts, const float* weights, float* out) {
  const int D = m.config().dim, E = static_cast<int>(w.experts.size()), A = rows * k;
  // Counting sort of the assignments by expert; rows stay ascending within an expert.
  std::vector<int> start(E + 1, 0), order(A);
  for (int a = 0; a < A; ++a) ++start[experts[a] + 1];
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int> fill(start.begin(), start.end() - 1);
  for (int a = 0; a < A; ++a) order[fill[experts[a]]++] = a;
  std::vector<Item> items;
  for (int e = 0; e < E; ++e)
    for (int f = start[e]; f < start[e + 1]; f += kBlockRows)
      items.push_back({e, f, std::min(kBlockRows, start[e + 1] - f)});

  thread_local std::vector<float> ybuf;  // [A, dim]: assignment a's expert output
  ybuf.resize(static_cast<size_t>(A) * D);
  float* yb = ybuf.data();
  auto run = [&](const Item& it) {
    thread_local std::vector<float> xs, y;
    const int n = padded_rows(it.count);
    xs.resize(static_cast<size_t>(n) * D);
    y.resize(static_cast<size_t>(n) * D);
    for (int i = 0; i < it.count; ++i)
      std::memcpy(&xs[static_cast<size_t>(i) * D], x + static_cast<int64_t>(order[it.first + i] / k) * D, D * 4);
    std::fill(xs.begin() + static_cast<ptrdiff_t>(it.count) * D, xs.end(), 0.0f);
    expert_rows(m, w.experts[it.expert], hidden, xs.data(), n, y.data());
    for (int i = 0; i < it.count; ++i)
      std::memcpy(yb + static_cast<int64_t>(order[it.first + i]) * D, &y[static_cast<size_t>(i) * D], D * 4);
  };
  const int n_items = static_cast<int>(items.size());
  // A parallel region costs a thread wake-up (far more on shared cores): a small step's experts
  // run on the calling thread, as cpu_backend.cc's worth_threads decides for the other ops.
  const int64_t multiply_adds = static_cast<int64_t>(A) * 3 * hidden * D;
  if (n_items >= omp_get_max_threads() && multiply_adds > (1 << 18)) {
    // One product per thread at a time (the libraries run single-threaded inside the region).
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n_items; ++i) run(items[i]);
  } else {
    for (const Item& it : items) run(it);  // few experts: each product uses every thread
  }
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(A) * D > (1 << 16))
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<int64_t>(r) * D;
    std::fill(o, o + D, 0.0f);
    for (int j = 0; j < k; ++j) accumulate(o, weights[r * k + j], yb + static_cast<int64_t>(r * k + j) * D, D);
  }
}

void MoeCpu::reference(const Model& m, const MoeWeights& w, int hidden, const float* x, int rows, int k,
                       const int32_t* experts, const float* weights, float* out) {
  const int D = m.config().dim;
  std::vector<float> y(D);
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<int64_t>(r) * D;
    std::fill(o, o + D, 0.0f);
    for (int j = 0; j < k; ++j) {
      expert_rows(m, w.experts[experts[r * k + j]], hidden, x + static_cast<int64_t>(r) * D, 1, y.data());
      accumulate(o, weights[r * k + j], y.data(), D);
    }
  }
}

}  // namespace yoco
