// Unicode normalization before added-token matching and pre-tokenization, as Hugging Face
// tokenizers' normalizers do it; the Unicode data comes from utf8proc. Only what byte-level BPE
// files use is supported: none, or NFC (Qwen2/2.5/3), alone or inside a Sequence
// (docs/design.md §2.1, tokenizer).
#pragma once

#include <string>
#include <string_view>

namespace yoco {

class Normalizer {
 public:
  enum class Form { kNone, kNfc };

  Normalizer() = default;
  explicit Normalizer(Form form) : form_(form) {}

  Form form() const { return form_; }
  bool identity() const { return form_ == Form::kNone; }

  // `text` normalized: `text` itself when normalization leaves it unchanged (no copy), else a
  // view into `scratch`. Each well-formed UTF-8 run is normalized on its own; bytes that are not
  // well-formed UTF-8 pass through unchanged (only they can make decode(encode(x)) differ from
  // the normalized x by more than the normalization).
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  Form form_ = Form::kNone;
};

}  // namespace yoco
