// The CPU engine's start line (docs/design.md §2.5, precision): which instruction-set path it runs
// and how bf16 weights are multiplied. apply_dtype_flag (model/model.h) logs it once the weights are
// in place, so the workers, yoco-cli and engine_bench all print it.
#pragma once

#include "common/log.h"
#include "model/model.h"

namespace yoco {

// `isa` (cpu::isa_path: avx2, avx512, avx512-bf16, amx, or base), `dtype`, `gemm` (the fp32
// library) and, for bf16 weights on a CPU without a bf16 matmul, `bf16_products` saying they are
// widened to fp32 in registers.
LogFields cpu_path_fields(const Model& model);

}  // namespace yoco
