// libFuzzer target: the KV store's object reader (docs/design.md §5: a bad object is a miss, never a crash
// or a wrong answer) on arbitrary bytes, and again after re-sealing the bytes' checksums so the
// fuzzer gets past them into the dims/payload checks; the document record parser on the same
// bytes. The same entry point is replayed over the seed corpus by a ctest in every build.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv_store/format.h"

namespace {

constexpr uint64_t kFingerprint = 0x5209b59ecc62efb3ull;

void check(const std::string& bytes) {
  for (uint32_t kind = 1; kind <= 3; ++kind) {
    auto obj = yoco::decode_object(bytes, static_cast<yoco::ObjectKind>(kind), kFingerprint, 1);
    if (!obj.ok() || kind != 1) continue;
    // A block that decodes must hold exactly rows × kv_dim values per side.
    if (obj->dims.size() != 2 || obj->dims[0] == 0 || obj->dims[1] == 0 || obj->dims[0] > (1u << 20) ||
        obj->dims[1] > (1u << 16))
      continue;
    const size_t n = static_cast<size_t>(obj->dims[0] * obj->dims[1]);
    if (n > (size_t{1} << 22)) continue;
    std::vector<float> k(n), v(n);
    (void)yoco::decode_kv_block(*obj, static_cast<int64_t>(obj->dims[0]), static_cast<int>(obj->dims[1]), k.data(),
                                v.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  check(bytes);
  if (bytes.size() >= yoco::kObjectHeaderBytes) {
    std::string sealed = bytes;
    yoco::kv_format_detail::seal_object(sealed);
    check(sealed);
  }
  (void)yoco::document_from_json(bytes, kFingerprint);
  return 0;
}
