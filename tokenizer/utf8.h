// UTF-8 as the tokenizer needs it: well-formedness per the Unicode standard (Table 3-7: no
// overlongs, no surrogates, nothing above U+10FFFF), and lossy repair by "maximal subparts"
// (one U+FFFD per maximal invalid subpart, as Python's errors="replace" and Rust's
// from_utf8_lossy do), so a stream and a one-shot decode agree byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace yoco::utf8 {

// Length (1..4) of the well-formed character starting at s[i], or 0 when none starts there.
size_t char_len(std::string_view s, size_t i);

// Number of bytes from s[i] that are a valid prefix of some character (0 when s[i] is not
// a lead byte). Equal to char_len for a complete character; less when it is cut short.
size_t prefix_len(std::string_view s, size_t i);

// The code point of the well-formed character at s[i] (char_len(s, i) must be > 0).
uint32_t decode(std::string_view s, size_t i);

bool is_valid(std::string_view s);

void append(std::string& out, uint32_t cp);

// Appends s with every maximal invalid subpart replaced by U+FFFD.
void append_lossy(std::string& out, std::string_view s);

// Bytes at the end of s that begin a character which more bytes could still complete
// (0..3): a stream holds these back instead of emitting half a character.
size_t incomplete_tail(std::string_view s);

// Unicode White_Space (what Rust's char::is_whitespace and regex \s accept).
bool is_white_space(uint32_t cp);

}  // namespace yoco::utf8
