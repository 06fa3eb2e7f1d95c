// The instruction-set path the CPU engine runs on, named once at start (docs/design.md, precision).
#include <cpuid.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {
namespace {

// CPUID leaf 7: AMX-BF16 is EDX bit 22 of sub-leaf 0, AVX512_BF16 is EAX bit 5 of sub-leaf 1.
bool cpu_has_amx_bf16() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);
}
bool cpu_has_avx512_bf16() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
}

}  // namespace

const char* isa_path() {
  switch (vec::isa()) {
    case vec::Isa::kBase:
      return "base";
    case vec::Isa::kAvx2:
      return "avx2";
    default:
      break;
  }
  if (cpu_has_amx_bf16()) return "amx";
  return cpu_has_avx512_bf16() ? "avx512-bf16" : "avx512";
}

}  // namespace yoco::cpu
