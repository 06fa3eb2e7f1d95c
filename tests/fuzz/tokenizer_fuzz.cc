// libFuzzer target: the tokenizer on arbitrary bytes. The first byte picks what the rest is:
//   0  text for encode/decode with a fixed tokenizer.json and a fixed tiktoken table:
//      decode(encode(x)) == x, ids known, the stream decoder agrees with decode; and with the
//      same tokenizer.json under Qwen2's layout (NFC normalizer, Qwen's split regex):
//      decode(encode(x)) == its normalizer's x
//   1  a tokenizer.json (parser), then encode/decode with whatever it accepted
//   2  a tiktoken rank file (parser), then encode/decode round trip
//   3  "pattern\ntext": a pre-tokenization regex in both dialects over the text
// Built with clang -fsanitize=fuzzer,address,undefined when YOCO_FUZZ=ON; the same entry point
// is replayed over tests/fuzz/corpus/tokenizer by a ctest in every build.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using yoco::Json;
using yoco::Tokenizer;

// Qwen2/2.5/3's split pattern, as their tokenizer.json has it.
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string fixed_hf_json(bool qwen) {
  Json::Object vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace(std::string(yoco::byte_level::char_of(static_cast<uint8_t>(b))), b);
  Json::Array merges;
  int next = 256;
  for (const char* m : {"t h", "h e", "th e", "Ġ t", "Ġt he", "i n", "a n", "an d", "Ġ a", "e r", "o n", "Ġ Ġ", "ĠĠ ĠĠ",
                        "1 2", "Ã ©", "ä ¸", "ä¸ Ń"}) {
    const std::string s(m);
    const size_t sp = s.find(' ');
    const std::string merged = s.substr(0, sp) + s.substr(sp + 1);
    merges.push_back(Json(s));
    if (!vocab.count(merged)) vocab.emplace(merged, next++);
  }
  Json::Array added{
      Json(Json::Object{{"id", 1000}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}),
      Json(Json::Object{{"id", 1001}, {"content", "<think>"}, {"special", false}, {"normalized", true}}),
  };
  Json::Object pre{
      {"type", "Sequence"},
      {"pretokenizers",
       Json(Json::Array{
           Json(Json::Object{
               {"type", "Split"},
               {"pattern", Json(Json::Object{{"Regex", std::string(qwen ? kQwenPattern : yoco::kCl100kPattern)}})},
               {"behavior", "Isolated"}}),
           Json(Json::Object{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}})})}};
  Json::Object root{{"model", Json(Json::Object{{"type", "BPE"}, {"vocab", Json(vocab)}, {"merges", Json(merges)}})},
                    {"added_tokens", Json(added)},
                    {"pre_tokenizer", Json(pre)}};
  if (qwen) root.emplace("normalizer", Json(Json::Object{{"type", "NFC"}}));
  return Json(root).dump();
}

std::string fixed_tiktoken() {
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  auto add = [&](const std::string& s, int rank) {
    std::string r;
    uint32_t v = 0;
    for (size_t i = 0; i < 3; ++i) v = (v << 8) | (i < s.size() ? static_cast<uint8_t>(s[i]) : 0);
    for (int k = 3; k >= 0; --k) r += b64[(v >> (6 * k)) & 63];
    if (s.size() == 1) r.replace(2, 2, "==");
    if (s.size() == 2) r.replace(3, 1, "=");
    out += r + " " + std::to_string(rank) + "\n";
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)), b);
  int rank = 256;
  for (const char* t : {"th", "he", "the", " t", "in", "an", "  ", "12", "\xc3\xa9"}) add(t, rank++);
  return out;
}

// What decode(encode(text)) gives with the fixed tokenizers: the text with each gap between the
// special tokens split out normalized on its own (a gap may start with a mark that would have
// composed with the token's last character: ">" + U+0338 is U+226F).
std::string expected_round_trip(const Tokenizer& tok, std::string_view text, bool allow_special) {
  constexpr std::string_view kEot = "<|endoftext|>";
  std::string out, scratch;
  size_t i = 0;
  for (size_t at; allow_special && (at = text.find(kEot, i)) != std::string_view::npos; i = at + kEot.size()) {
    out += tok.normalizer().apply(text.substr(i, at - i), scratch);
    out += kEot;
  }
  out += tok.normalizer().apply(text.substr(i), scratch);
  return out;
}

void check_round_trip(const Tokenizer& tok, std::string_view text, bool exact) {
  for (bool allow_special : {false, true}) {
    const auto ids = tok.encode(text, allow_special);
    if (!tok.check_ids(ids).ok()) __builtin_trap();
    const std::string back = tok.decode(ids);
    if (exact && back != expected_round_trip(tok, text, allow_special)) __builtin_trap();
    yoco::StreamDecoder sd(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      if (!yoco::utf8::is_valid(piece)) __builtin_trap();
      streamed += piece;
    }
    streamed += sd.flush();
    std::string repaired;
    yoco::utf8::append_lossy(repaired, back);
    if (streamed != repaired) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const auto hf = std::move(Tokenizer::from_hf_json(fixed_hf_json(false))).value();
  static const auto qwen = std::move(Tokenizer::from_hf_json(fixed_hf_json(true))).value();
  static const auto tt =
      std::move(Tokenizer::from_tiktoken(fixed_tiktoken(), yoco::kCl100kPattern, {{"<|endoftext|>", 300}})).value();
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      check_round_trip(*hf, in, true);
      check_round_trip(*qwen, in, true);
      check_round_trip(*tt, in, true);
      break;
    case 1: {
      auto tok = Tokenizer::from_hf_json(in);
      if (tok.ok()) {
        // No exact round trip here: a file may lack byte tokens (dropped, as tokenizers does).
        check_round_trip(*tok.value(), "Hello, world! 123 \xe4\xb8\xad\xe6\x96\x87 <|endoftext|>\n", false);
        check_round_trip(*tok.value(), in.substr(0, 256), false);
      }
      break;
    }
    case 2: {
      auto tok = Tokenizer::from_tiktoken(in, yoco::kCl100kPattern, {{"<|endoftext|>", 60000}});
      if (tok.ok()) {
        // Every byte has a rank and cl100k's pattern covers all text: the round trip is exact.
        check_round_trip(*tok.value(), "Hello, world! 123 \xe4\xb8\xad\xe6\x96\x87 \xff\n", true);
        check_round_trip(*tok.value(), in.substr(0, 256), true);
      }
      break;
    }
    case 3: {
      const size_t nl = in.find('\n');
      if (nl == std::string_view::npos) break;
      const std::string_view pattern = in.substr(0, nl), text = in.substr(nl + 1);
      if (!yoco::utf8::is_valid(text)) break;
      for (auto dialect : {yoco::Regex::Dialect::kOniguruma, yoco::Regex::Dialect::kRust}) {
        auto re = yoco::Regex::compile(pattern, dialect, "fuzz");
        if (!re.ok()) continue;
        size_t last = 0;
        re.value()->for_each_match(text, [&](size_t b, size_t e) {
          if (b < last || e < b || e > text.size()) __builtin_trap();
          if (yoco::utf8::char_len(text, b) == 0 && b < text.size()) __builtin_trap();  // not at a character start
          last = e;
        });
      }
      break;
    }
  }
  return 0;
}
