// libFuzzer target: the safetensors header parser (and the JSON reader under it) on arbitrary
// bytes. Built with clang -fsanitize=fuzzer,address,undefined when YOCO_FUZZ=ON; the same
// entry point is replayed over the seed corpus by a ctest in every build.
#include <cstddef>
#include <cstdint>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = yoco::parse_safetensors_header(data, size, size);
  if (h.ok()) {
    // Whatever the parser accepts must be internally consistent.
    for (const auto& t : h.value().tensors) {
      if (t.end < t.begin || h.value().data_offset + t.end > size) __builtin_trap();
    }
  }
  return 0;
}
