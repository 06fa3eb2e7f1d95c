// The mixture-of-experts FFN on the CPU (docs/design.md §2.2): the routed experts' weighted sum
// over Model's fp32 or bf16 products (the routing is cpu::moe_route, kernels/cpu/ops.h). Private to
// model/: the CPU backend (model/cpu_backend.cc) calls it; tests/unit/model/moe_cpu_test.cc holds
// the grouped version to the plain one.
#pragma once

#include <cstdint>

namespace yoco {

class Model;
struct MoeWeights;
struct ExpertWeights;

struct MoeCpu {
  // out[r] = Σ_j weights[r·k + j] · SwiGLU_{experts[r·k + j]}(x[r]) for each of `rows` rows of x
  // [rows, dim]; out [rows, dim] is overwritten. `hidden` is each expert's (this rank's) hidden size.
  // Tokens are grouped by expert: each chosen expert runs fc1|gate and fc2 as one product over the
  // rows that chose it, so only the chosen experts' weights are read (docs/design.md §2.5, MoE).
  // Threads split the experts (and an expert's rows, in blocks) when there are enough of them,
  // else each product uses every thread. The sum over a row's k experts is taken in slot order,
  // so a row's result does not depend on the thread count.
  static void grouped(const Model& m, const MoeWeights& w, int hidden, const float* x, int rows, int k,
                      const int32_t* experts, const float* weights, float* out);
  // The plain version grouped() is tested against: each row alone, each of its experts in turn.
  static void reference(const Model& m, const MoeWeights& w, int hidden, const float* x, int rows, int k,
                        const int32_t* experts, const float* weights, float* out);

 private:
  // fc1|gate, SwiGLU and fc2 of one expert over n gathered rows xs [n, dim]: y [n, dim].
  static void expert_rows(const Model& m, const ExpertWeights& e, int hidden, const float* xs, int n, float* y);
};

}  // namespace yoco
