#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "tokenizer/utf8.h"

namespace yoco {
namespace {

// Characters below U+0300 are all NFC_Quick_Check=Yes and none combines with a preceding one,
// so text without a byte >= 0xCC (the lead bytes of U+0300 and above) is already NFC.
bool maybe_changes_under_nfc(std::string_view s) {
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0xCC) return true;
  return false;
}

// Appends NFC(run) for a well-formed run; utf8proc's flags are those of its own utf8proc_NFC.
void append_nfc(std::string& out, std::string_view run) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()), static_cast<utf8proc_ssize_t>(run.size()),
                   &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    out.append(run);  // only on allocation failure: the run was checked well-formed
    return;
  }
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
}

}  // namespace

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  if (form_ == Form::kNone || !maybe_changes_under_nfc(text)) return text;
  scratch.clear();
  scratch.reserve(text.size() + text.size() / 8);
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    size_t j = i;
    while (j < n) {
      const size_t k = utf8::char_len(text, j);
      if (k == 0) break;
      j += k;
    }
    if (j > i) append_nfc(scratch, text.substr(i, j - i));
    size_t k = j;
    while (k < n && utf8::char_len(text, k) == 0) ++k;
    scratch.append(text.substr(j, k - j));
    i = k;
  }
  if (scratch == text) return text;
  return scratch;
}

}  // namespace yoco
