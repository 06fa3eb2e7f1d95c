#include "tokenizer/token_table.h"

#include <algorithm>

namespace yoco {

Status fill_token_table(std::vector<TokenEntry> entries, const std::string& field, TokenizerData& data) {
  int64_t max_id = -1;
  size_t total_bytes = 0;
  for (const TokenEntry& e : entries) {
    if (e.id < 0 || e.id > kMaxTokenId)
      return invalid_argument(field + ": token id " + std::to_string(e.id) + " out of range [0, " +
                              std::to_string(kMaxTokenId) + "]");
    max_id = std::max<int64_t>(max_id, e.id);
    total_bytes += e.bytes.size();
  }
  const int64_t n = max_id + 1;
  if (n > 4 * static_cast<int64_t>(entries.size()) + 65536)
    return invalid_argument(field + ": ids too sparse: largest id " + std::to_string(max_id) + " for " +
                            std::to_string(entries.size()) + " tokens");
  if (total_bytes >= UINT32_MAX) return invalid_argument(field + ": tokens too long in total");
  std::sort(entries.begin(), entries.end(), [](const TokenEntry& a, const TokenEntry& b) { return a.id < b.id; });
  data.token_text.assign(n, std::string());
  data.token_flags.assign(n, 0);
  data.token_offsets.assign(n + 1, 0);
  data.token_bytes.clear();
  data.token_bytes.reserve(total_bytes);
  data.token_ids.reserve(entries.size());
  size_t k = 0;
  for (int64_t id = 0; id < n; ++id) {
    data.token_offsets[id] = static_cast<uint32_t>(data.token_bytes.size());
    if (k < entries.size() && entries[k].id == id) {
      TokenEntry& e = entries[k++];
      if (k < entries.size() && entries[k].id == id)
        return invalid_argument(field + ": id " + std::to_string(id) + " is given to both \"" + e.text + "\" and \"" +
                                entries[k].text + "\"");
      data.token_bytes += e.bytes;
      data.token_flags[id] = TokenizerData::kKnown | (e.special ? TokenizerData::kSpecial : 0);
      data.token_ids.emplace(e.text, static_cast<int32_t>(id));
      data.token_text[id] = std::move(e.text);
    }
  }
  data.token_offsets[n] = static_cast<uint32_t>(data.token_bytes.size());
  return Status::Ok();
}

}  // namespace yoco
