// The per-id tables both parsers fill: spelling, decoded bytes and flags of every token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace yoco {

// Ids are bounded so a hostile file cannot make the tables huge: below kMaxTokenId, and the id
// space at most 4x the token count plus 64Ki (room for padding and reserved ranges).
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

struct TokenEntry {
  int32_t id;
  std::string text;   // spelling in the file
  std::string bytes;  // what it decodes to
  bool special;
};

// Fills data.token_{text,bytes,offsets,flags,ids}. Every id must be unique; `field` names the
// source in errors.
Status fill_token_table(std::vector<TokenEntry> entries, const std::string& field, TokenizerData& data);

}  // namespace yoco
