#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it, older kernels answer EINVAL
#endif

namespace yoco {

size_t huge_page_bytes() {
  static const size_t bytes = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    size_t b = 0;
    if (f >> b && b > 0 && (b & (b - 1)) == 0) return b;
    return static_cast<size_t>(2) << 20;
  }();
  return bytes;
}

size_t collapse_to_huge_pages(void* p, size_t bytes) {
  const uintptr_t page = huge_page_bytes();
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (p == nullptr || end <= begin) return 0;
  void* at = reinterpret_cast<void*>(begin);
  const size_t len = end - begin;
  if (madvise(at, len, MADV_HUGEPAGE) != 0) return 0;
  return madvise(at, len, MADV_COLLAPSE) == 0 ? len : 0;
}

}  // namespace yoco
