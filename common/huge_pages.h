// Transparent huge pages for memory that lives long and is streamed: `membw --huge-pages`
// measures what they change (bench/README.md, "Tried and rejected: weights in huge pages").
#pragma once

#include <cstddef>

namespace yoco {

// The size of a transparent huge page on this machine (the kernel's hpage_pmd_size; 2 MiB on
// x86-64 when the kernel does not say).
size_t huge_page_bytes();

// Asks the kernel to back the whole huge pages inside [p, p + bytes) with transparent huge pages
// now: MADV_HUGEPAGE, then MADV_COLLAPSE (Linux 6.1+), which moves the range into huge pages
// before it returns. The contents are unchanged. Returns the bytes MADV_COLLAPSE moved: 0 where
// the range holds no whole huge page, the kernel has no THP or refuses (THP "never", an older
// kernel, no free huge page), in which case MADV_HUGEPAGE alone still lets khugepaged do it later.
size_t collapse_to_huge_pages(void* p, size_t bytes);

}  // namespace yoco
