#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace yoco::byte_level {
namespace {

struct Alphabet {
  std::array<uint32_t, 256> cp{};  // byte -> code point
  std::array<char, 512> utf8{};    // byte -> its UTF-8 (2 slots each, second may be unused)
  std::array<uint8_t, 256> utf8_len{};
  std::array<int16_t, 324> byte{};  // code point (< 324) -> byte, or -1

  Alphabet() {
    byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? b : next++;
      byte[cp[b]] = static_cast<int16_t>(b);
      std::string s;
      utf8::append(s, cp[b]);
      utf8_len[b] = static_cast<uint8_t>(s.size());
      for (size_t k = 0; k < s.size(); ++k) utf8[2 * b + k] = s[k];
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string_view char_of(uint8_t b) {
  const Alphabet& a = alphabet();
  return {&a.utf8[2 * b], a.utf8_len[b]};
}

int byte_of(uint32_t cp) { return cp < 324 ? alphabet().byte[cp] : -1; }

void encode(std::string& out, std::string_view bytes) {
  const Alphabet& a = alphabet();
  for (unsigned char b : bytes) out.append(&a.utf8[2 * b], a.utf8_len[b]);
}

bool decode(std::string& out, std::string_view token) {
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const size_t k = utf8::char_len(token, i);
    const int b = k == 0 ? -1 : byte_of(utf8::decode(token, i));
    if (b < 0) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(b);
    i += k;
  }
  return true;
}

}  // namespace yoco::byte_level
