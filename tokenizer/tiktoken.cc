// tiktoken rank files: one "base64(token bytes) rank" per line. The rank is the token's id and
// its merge priority; the pattern and the special tokens come from the caller.
#include <algorithm>
#include <array>
#include <charconv>
#include <unordered_map>

#include "tokenizer/token_table.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

// Strict standard base64 with '=' padding; false on anything else.
bool base64_decode(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const size_t at = i + k;
      int8_t d = 0;
      if (at >= in.size() - pad) {
        if (in[at] != '=') return false;
      } else {
        d = table[static_cast<uint8_t>(in[at])];
        if (d < 0) return false;
      }
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (i + 4 < in.size() || pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (i + 4 < in.size() || pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return true;
}

}  // namespace

Result<TokenizerData> parse_tiktoken(std::string_view ranks, std::string_view pattern,
                                     const std::map<std::string, int32_t>& special_tokens) {
  std::unordered_map<std::string, int32_t> encoder;
  std::vector<TokenEntry> entries;
  size_t line_no = 0;
  std::string bytes;
  while (!ranks.empty()) {
    ++line_no;
    const size_t nl = ranks.find('\n');
    std::string_view line = ranks.substr(0, nl);
    ranks = nl == std::string_view::npos ? std::string_view() : ranks.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = "ranks line " + std::to_string(line_no);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return invalid_argument(where + ": expected \"<base64 token> <rank>\"");
    const std::string_view b64 = line.substr(0, sp), rank_text = line.substr(sp + 1);
    if (!base64_decode(b64, bytes)) return invalid_argument(where + ": token is not valid base64");
    int64_t rank = -1;
    auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 || rank > kMaxTokenId)
      return invalid_argument(where + ": rank must be an integer in [0, " + std::to_string(kMaxTokenId) + "]");
    if (!encoder.emplace(bytes, static_cast<int32_t>(rank)).second)
      return invalid_argument(where + ": token listed twice (first with rank " + std::to_string(encoder[bytes]) + ")");
    entries.push_back({static_cast<int32_t>(rank), bytes, bytes, false});
  }
  for (int b = 0; b < 256; ++b) {
    if (!encoder.count(std::string(1, static_cast<char>(b))))
      return invalid_argument("ranks: byte " + std::to_string(b) + " has no rank (every single byte needs one)");
  }
  for (const auto& [text, id] : special_tokens) {
    if (text.empty()) return invalid_argument("special_tokens: empty token");
    if (id < 0 || id > kMaxTokenId)
      return invalid_argument("special_tokens[\"" + text + "\"]: id " + std::to_string(id) + " out of range");
    entries.push_back({id, text, text, true});
  }

  TokenizerData data;
  // Duplicate ranks (or a special token on a rank) are refused here with the id named.
  YOCO_RETURN_IF_ERROR(fill_token_table(std::move(entries), "ranks + special_tokens", data));

  data.bpe = std::make_unique<BpeModel>();
  BpeModel& bpe = *data.bpe;
  for (int b = 0; b < 256; ++b) {
    const int32_t id = encoder[std::string(1, static_cast<char>(b))];
    for (int place = 0; place < 4; ++place)
      bpe.set_byte_init(static_cast<BpeModel::Place>(place), static_cast<uint8_t>(b), {BpeModel::InitKind::kId, {id}});
  }
  // Every way to cut a token into two tokens is a pair that merges into it, ranked by it.
  for (const auto& [token, rank] : encoder) {
    for (size_t k = 1; k < token.size(); ++k) {
      auto l = encoder.find(token.substr(0, k));
      if (l == encoder.end()) continue;
      auto r = encoder.find(token.substr(k));
      if (r == encoder.end()) continue;
      bpe.pairs().insert_or_assign(l->second, r->second, {rank, rank});
    }
  }
  for (auto& [token, rank] : encoder) bpe.add_whole_piece(token, rank);
  bpe.finish();

  for (const auto& [text, id] : special_tokens) {
    AddedToken t;
    t.content = text;
    t.id = id;
    t.special = true;
    t.normalized = false;
    data.added_tokens.push_back(std::move(t));
  }
  PreTokenizerStep st;
  YOCO_ASSIGN_OR_RETURN(st.regex, Regex::compile(pattern, Regex::Dialect::kRust, "tiktoken pattern"));
  st.behavior = SplitBehavior::kRemoved;  // tiktoken keeps the matches and drops what lies between
  st.invert = true;
  data.pre_tokenizer = PreTokenizer({std::move(st)});
  return data;
}

}  // namespace yoco
