#include "tokenizer/utf8.h"

namespace yoco::utf8 {
namespace {

// Total length of a character by its lead byte (0: not a lead byte), and the range its second
// byte must fall in (Unicode Table 3-7); later bytes are always 80..BF.
struct Lead {
  uint8_t len, lo, hi;
};

Lead lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t prefix_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  if (i >= n) return 0;
  const Lead l = lead(p[i]);
  if (l.len <= 1) return l.len;
  size_t k = 1;
  if (i + k < n && p[i + k] >= l.lo && p[i + k] <= l.hi) {
    ++k;
    while (k < l.len && i + k < n && p[i + k] >= 0x80 && p[i + k] <= 0xBF) ++k;
  }
  return k;
}

size_t char_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return 1;
  const size_t want = lead(b).len;
  return want != 0 && prefix_len(s, i) == want ? want : 0;
}

uint32_t decode(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  if (p[0] < 0x80) return p[0];
  if (p[0] < 0xE0) return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  if (p[0] < 0xF0) return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t k = char_len(s, i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_lossy(std::string& out, std::string_view s) {
  size_t i = 0, run = 0;  // [run, i): well-formed bytes not yet copied
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t k = char_len(s, i);
    if (k != 0) {
      i += k;
      continue;
    }
    out.append(s.substr(run, i - run));
    out += "\xEF\xBF\xBD";
    const size_t bad = prefix_len(s, i);
    i += bad == 0 ? 1 : bad;
    run = i;
  }
  out.append(s.substr(run));
}

size_t incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const size_t i = n - k;
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    const size_t want = lead(b).len;
    return want > k && prefix_len(s, i) == k ? k : 0;
  }
  return 0;
}

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace yoco::utf8
