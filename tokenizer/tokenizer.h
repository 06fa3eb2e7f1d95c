// Byte-level BPE tokenizer, read from a Hugging Face tokenizer.json or a tiktoken rank file,
// encoding exactly as the `tokenizers` and `tiktoken` libraries do (checked against them on a
// mixed-script corpus in tests/unit/tokenizer_test.cc).
//
//   encode:  added/special tokens with normalized=false are split out first (special ones
//            only when allowed), the rest is normalized (NFC when the file says so), then the
//            normalized=true added tokens are split out of that, the rest is pre-tokenized by
//            the file's regex (PCRE2) and each piece BPE-merged (tokenizers' order).
//            Any byte string encodes, invalid UTF-8 included: a run of bytes that is not
//            well-formed UTF-8 bypasses the normalizer and the regex and becomes a piece of its
//            own, so decode(encode(x)) == x for every x (== NFC(x), run by well-formed run,
//            with an NFC normalizer).
//   decode:  the exact bytes of the tokens (may be invalid UTF-8 when ids cut a character);
//            StreamDecoder emits only whole, valid UTF-8 characters.
//
// tokenizer.json support: model BPE (vocab, merges as "a b" or ["a", "b"], unk_token, fuse_unk,
// byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix), normalizer none
// or NFC (alone or in a Sequence; Qwen2's), pre_tokenizer ByteLevel or Sequence[Split...,
// ByteLevel], added_tokens with special/lstrip/rstrip/single_word/normalized, decoder ByteLevel.
// Any other normalizer or pre-tokenizer is refused naming it; post_processor is ignored:
// BOS/EOS come from tokenizer_config.json.
//
// A Tokenizer is immutable after loading and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace yoco {

// What a file parser produces; the Tokenizer owns it.
struct TokenizerData {
  std::unique_ptr<BpeModel> bpe;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> added_tokens;
  // Per id (0 .. n-1): its spelling in the file, the bytes it decodes to, and flags.
  std::vector<std::string> token_text;
  std::string token_bytes;              // all ids' bytes, back to back
  std::vector<uint32_t> token_offsets;  // n + 1 offsets into token_bytes
  std::vector<uint8_t> token_flags;     // kKnown | kSpecial
  std::unordered_map<std::string, int32_t> token_ids;
  static constexpr uint8_t kKnown = 1, kSpecial = 2;
};

class Tokenizer {
 public:
  // tokenizer.json, or else the one *.tiktoken file, plus tokenizer_config.json when present
  // (bos_token, eos_token, add_bos_token, add_eos_token; for tiktoken also tiktoken_pattern,
  // default cl100k_base's, and special_tokens {"<|endoftext|>": 100257, ...}).
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_dir);
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(std::string_view json);
  static Result<std::unique_ptr<Tokenizer>> from_tiktoken(std::string_view ranks, std::string_view pattern,
                                                          const std::map<std::string, int32_t>& special_tokens);
  // Applies a tokenizer_config.json (BOS/EOS names and flags) to a loaded tokenizer.
  Status apply_config(std::string_view config_json);

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false, bool add_bos = false) const;
  void encode_to(std::string_view text, bool allow_special, bool add_bos, std::vector<int32_t>& out) const;

  // Unknown ids (padding rows of a larger embedding table, say) decode to nothing.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The same, but an unknown id is an error naming it: "ids[3]: unknown token id 100300".
  Result<std::string> decode_checked(std::span<const int32_t> ids, bool skip_special = false) const;
  Status check_ids(std::span<const int32_t> ids) const;

  // 1 + the largest id (ids in between may be unused, as in cl100k_base).
  int32_t vocab_size() const { return static_cast<int32_t>(data_.token_flags.size()); }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  bool add_bos_token() const { return add_bos_token_; }  // tokenizer_config.json's flag
  bool add_eos_token() const { return add_eos_token_; }

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;  // the file's spelling
  bool is_known(int32_t id) const {
    return id >= 0 && id < vocab_size() && (data_.token_flags[id] & TokenizerData::kKnown);
  }
  bool is_special(int32_t id) const { return is_known(id) && (data_.token_flags[id] & TokenizerData::kSpecial); }
  // The bytes id decodes to; empty for an unknown id.
  std::string_view token_bytes(int32_t id) const;

  const Normalizer& normalizer() const { return data_.normalizer; }
  const PreTokenizer& pre_tokenizer() const { return data_.pre_tokenizer; }
  const BpeModel& bpe() const { return *data_.bpe; }

 private:
  explicit Tokenizer(TokenizerData data);
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerData data_;
  AddedTokenMatcher added_;
  std::optional<int32_t> bos_id_, eos_id_;
  bool add_bos_token_ = false, add_eos_token_ = false;
};

// Turns a stream of ids into text that never contains half a UTF-8 character: bytes of a
// character still incomplete are held until a later id completes it. Bytes that can never
// form a character become U+FFFD (one per maximal invalid subpart), so the concatenation of
// all push() results and flush() is the U+FFFD-repaired decode() of all ids, and exactly
// decode() of all ids whenever that is valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();  // emits what is held back (as U+FFFD) and starts over

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

// The parsers behind from_hf_json / from_tiktoken (tokenizer/hf_json.cc, tokenizer/tiktoken.cc).
Result<TokenizerData> parse_hf_tokenizer_json(std::string_view json);
Result<TokenizerData> parse_tiktoken(std::string_view ranks, std::string_view pattern,
                                     const std::map<std::string, int32_t>& special_tokens);

}  // namespace yoco
