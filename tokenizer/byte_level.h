// GPT-2's byte-level alphabet ("bytes_to_unicode"): every byte is shown as one printable
// character, so a byte-level vocabulary is a set of strings. Printable Latin-1 bytes stand for
// themselves; the other 68 bytes (controls, space, DEL, NBSP, soft hyphen) take U+0100 onwards.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace yoco::byte_level {

// UTF-8 of the character that stands for byte b (1 or 2 bytes).
std::string_view char_of(uint8_t b);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int byte_of(uint32_t cp);

// Appends the byte-level spelling of raw bytes.
void encode(std::string& out, std::string_view bytes);

// Appends the raw bytes a byte-level string spells; false (out unchanged) when a character
// is outside the alphabet or the string is not valid UTF-8.
bool decode(std::string& out, std::string_view token);

}  // namespace yoco::byte_level
