// What a document id looks like: exactly the form kv_store's document_id() mints, "doc-" and
// 32 lowercase hex digits (docs/design.md §5). The router, the prefill worker and the KV cache
// check it before an id is used as a store key; anything else is the caller's INVALID_ARGUMENT,
// never a store error.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace yoco {

inline constexpr size_t kDocumentIdLength = 36;

inline bool is_document_id(std::string_view id) {
  if (id.size() != kDocumentIdLength || id.substr(0, 4) != "doc-") return false;
  return std::all_of(id.begin() + 4, id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "<field>: "<id>" is not a document id (...)"; the id quoted, cut to 40 bytes, control and
// non-ASCII bytes as \xNN so it cannot break a log line or a message.
inline std::string not_a_document_id(const std::string& field, std::string_view id) {
  std::string q;
  for (size_t i = 0; i < std::min<size_t>(id.size(), 40); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    } else {
      q += static_cast<char>(c);
    }
  }
  if (id.size() > 40) q += "...";
  return field + ": \"" + q + "\" is not a document id (doc- and 32 lowercase hex digits)";
}

}  // namespace yoco
