// Hugging Face tokenizer.json: the BPE model, the NFC normalizer (alone or in a Sequence),
// byte-level pre-tokenizer (alone or after Split steps in a Sequence), added tokens and a
// ByteLevel decoder. Everything else is refused with an error naming the field rather than
// encoded differently from `tokenizers`.
#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "common/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/token_table.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 64)) out += c;
  if (s.size() > 64) out += "...";
  return out + "\"";
}

Status get_bool(const Json& obj, const char* key, const std::string& where, bool& out) {
  const Json* v = obj.find(key);
  if (!v || v->is_null()) return Status::Ok();
  if (!v->is_bool()) return invalid_argument(where + "." + key + ": must be true or false");
  out = v->as_bool();
  return Status::Ok();
}

// A string field; absent or null leaves `out` alone and sets present = false.
Status get_string(const Json& obj, const char* key, const std::string& where, std::string& out, bool* present) {
  const Json* v = obj.find(key);
  if (present) *present = v && !v->is_null();
  if (!v || v->is_null()) return Status::Ok();
  if (!v->is_string()) return invalid_argument(where + "." + key + ": must be a string");
  out = v->as_string();
  return Status::Ok();
}

Result<std::string> get_type(const Json& obj, const std::string& where) {
  if (!obj.is_object()) return invalid_argument(where + ": must be an object or null");
  const Json* t = obj.find("type");
  if (!t || !t->is_string()) return invalid_argument(where + ".type: missing or not a string");
  return t->as_string();
}

Result<int32_t> get_id(const Json& v, const std::string& where) {
  if (!v.is_integer() || v.as_int() < 0 || v.as_int() > kMaxTokenId)
    return invalid_argument(where + ": must be an integer id in [0, " + std::to_string(kMaxTokenId) + "]");
  return static_cast<int32_t>(v.as_int());
}

// Appends the steps one pre-tokenizer contributes; ByteLevel must come last.
Status parse_pre_tokenizer(const Json& j, const std::string& where, int depth, std::vector<PreTokenizerStep>& steps,
                           bool& byte_level) {
  if (depth > 8) return invalid_argument(where + ": nested too deeply");
  YOCO_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (byte_level) return invalid_argument(where + ": only ByteLevel may be the last pre-tokenizer, not " + type);
  if (type == "Sequence") {
    const Json* list = j.find("pretokenizers");
    if (!list || !list->is_array()) return invalid_argument(where + ".pretokenizers: must be an array");
    for (size_t i = 0; i < list->as_array().size(); ++i) {
      YOCO_RETURN_IF_ERROR(parse_pre_tokenizer(list->as_array()[i], where + ".pretokenizers[" + std::to_string(i) + "]",
                                               depth + 1, steps, byte_level));
    }
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    bool add_prefix_space = true, use_regex = true;  // tokenizers' defaults
    YOCO_RETURN_IF_ERROR(get_bool(j, "add_prefix_space", where, add_prefix_space));
    YOCO_RETURN_IF_ERROR(get_bool(j, "use_regex", where, use_regex));
    PreTokenizerStep st;
    st.add_prefix_space = add_prefix_space;
    if (use_regex) {
      YOCO_ASSIGN_OR_RETURN(st.regex, Regex::compile(kGpt2Pattern, Regex::Dialect::kOniguruma, where));
      st.behavior = SplitBehavior::kIsolated;
    }
    steps.push_back(std::move(st));
    byte_level = true;
    return Status::Ok();
  }
  if (type == "Split") {
    const Json* pattern = j.find("pattern");
    if (!pattern || !pattern->is_object())
      return invalid_argument(where + ".pattern: must be {\"Regex\": ...} or {\"String\": ...}");
    PreTokenizerStep st;
    if (const Json* re = pattern->find("Regex"); re && re->is_string()) {
      YOCO_ASSIGN_OR_RETURN(st.regex,
                            Regex::compile(re->as_string(), Regex::Dialect::kOniguruma, where + ".pattern.Regex"));
    } else if (const Json* s = pattern->find("String"); s && s->is_string()) {
      if (s->as_string().empty()) return invalid_argument(where + ".pattern.String: must not be empty");
      YOCO_ASSIGN_OR_RETURN(st.regex,
                            Regex::compile(s->as_string(), Regex::Dialect::kLiteral, where + ".pattern.String"));
    } else {
      return invalid_argument(where + ".pattern: must be {\"Regex\": string} or {\"String\": string}");
    }
    std::string behavior;
    bool present = false;
    YOCO_RETURN_IF_ERROR(get_string(j, "behavior", where, behavior, &present));
    if (!present) return invalid_argument(where + ".behavior: missing");
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous},
    };
    bool known = false;
    for (const auto& [name, b] : kBehaviors) {
      if (behavior == name) st.behavior = b, known = true;
    }
    if (!known) return invalid_argument(where + ".behavior: unknown value " + quoted(behavior));
    YOCO_RETURN_IF_ERROR(get_bool(j, "invert", where, st.invert));
    steps.push_back(std::move(st));
    return Status::Ok();
  }
  return invalid_argument(where + ".type: " + quoted(type) + " is not supported (Split, ByteLevel, Sequence)");
}

// NFC, or a Sequence of normalizers that are all NFC (or empty): what byte-level files use.
// Applying NFC twice is applying it once, so any such Sequence is NFC or nothing.
Status parse_normalizer(const Json& j, const std::string& where, int depth, Normalizer::Form& form) {
  if (j.is_null()) return Status::Ok();
  if (depth > 8) return invalid_argument(where + ": nested too deeply");
  YOCO_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type == "NFC") {
    form = Normalizer::Form::kNfc;
    return Status::Ok();
  }
  if (type == "Sequence") {
    const Json* list = j.find("normalizers");
    if (!list || !list->is_array()) return invalid_argument(where + ".normalizers: must be an array");
    for (size_t i = 0; i < list->as_array().size(); ++i)
      YOCO_RETURN_IF_ERROR(
          parse_normalizer(list->as_array()[i], where + ".normalizers[" + std::to_string(i) + "]", depth + 1, form));
    return Status::Ok();
  }
  return invalid_argument(where + ".type: " + quoted(type) + " is not supported (NFC, Sequence)");
}

Status check_decoder(const Json* j, const std::string& where, int depth) {
  if (!j || j->is_null()) return Status::Ok();
  if (depth > 8) return invalid_argument(where + ": nested too deeply");
  YOCO_ASSIGN_OR_RETURN(std::string type, get_type(*j, where));
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    const Json* list = j->find("decoders");
    if (!list || !list->is_array()) return invalid_argument(where + ".decoders: must be an array");
    for (size_t i = 0; i < list->as_array().size(); ++i)
      YOCO_RETURN_IF_ERROR(
          check_decoder(&list->as_array()[i], where + ".decoders[" + std::to_string(i) + "]", depth + 1));
    return Status::Ok();
  }
  return invalid_argument(where + ".type: " + quoted(type) + " is not supported (ByteLevel)");
}

// The bytes a token decodes to, as tokenizers' ByteLevel decoder does it: through the byte
// alphabet when every character is in it, else the token's own UTF-8.
std::string decoded_bytes(const std::string& token) {
  std::string out;
  if (!byte_level::decode(out, token)) out = token;
  return out;
}

}  // namespace

Result<TokenizerData> parse_hf_tokenizer_json(std::string_view text) {
  YOCO_ASSIGN_OR_RETURN(Json root, Json::parse(text));
  if (!root.is_object()) return invalid_argument("tokenizer.json: top level must be an object");
  const Json* model = root.find("model");
  if (!model || !model->is_object()) return invalid_argument("model: missing or not an object");
  if (const Json* t = model->find("type")) {
    if (!t->is_string()) return invalid_argument("model.type: must be a string");
    if (t->as_string() != "BPE")
      return invalid_argument("model.type: " + quoted(t->as_string()) + " is not supported (BPE only)");
  }
  if (const Json* d = model->find("dropout"); d && !d->is_null()) {
    if (!d->is_number()) return invalid_argument("model.dropout: must be a number or null");
    if (d->as_double() != 0.0) return invalid_argument("model.dropout: BPE dropout is not supported for inference");
  }
  std::string unk_token, prefix, suffix;
  bool has_unk = false, has_prefix = false, has_suffix = false;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  YOCO_RETURN_IF_ERROR(get_string(*model, "unk_token", "model", unk_token, &has_unk));
  YOCO_RETURN_IF_ERROR(get_string(*model, "continuing_subword_prefix", "model", prefix, &has_prefix));
  YOCO_RETURN_IF_ERROR(get_string(*model, "end_of_word_suffix", "model", suffix, &has_suffix));
  YOCO_RETURN_IF_ERROR(get_bool(*model, "fuse_unk", "model", fuse_unk));
  YOCO_RETURN_IF_ERROR(get_bool(*model, "byte_fallback", "model", byte_fallback));
  YOCO_RETURN_IF_ERROR(get_bool(*model, "ignore_merges", "model", ignore_merges));

  // Vocabulary.
  const Json* vocab_json = model->find("vocab");
  if (!vocab_json || !vocab_json->is_object()) return invalid_argument("model.vocab: missing or not an object");
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_json->as_object().size());
  std::vector<TokenEntry> entries;
  entries.reserve(vocab_json->as_object().size());
  for (const auto& [token, id_json] : vocab_json->as_object()) {
    YOCO_ASSIGN_OR_RETURN(int32_t id, get_id(id_json, "model.vocab[" + quoted(token) + "]"));
    if (token.empty()) return invalid_argument("model.vocab: empty token string");
    vocab.emplace(token, id);
    entries.push_back({id, token, decoded_bytes(token), false});
  }
  auto lookup = [&](const std::string& s) -> int32_t {
    auto it = vocab.find(s);
    return it == vocab.end() ? -1 : it->second;
  };
  int32_t unk_id = -1;
  if (has_unk) {
    unk_id = lookup(unk_token);
    if (unk_id < 0) return invalid_argument("model.unk_token: " + quoted(unk_token) + " is not in model.vocab");
  }

  TokenizerData data;
  data.bpe = std::make_unique<BpeModel>();
  BpeModel& bpe = *data.bpe;

  // Merges: "left right" strings or ["left", "right"] pairs; rank = position, later repeats win.
  const Json* merges = model->find("merges");
  if (!merges || !merges->is_array()) return invalid_argument("model.merges: missing or not an array");
  const auto& ml = merges->as_array();
  for (size_t i = 0; i < ml.size(); ++i) {
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    std::string left, right;
    if (ml[i].is_string()) {
      const std::string& s = ml[i].as_string();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return invalid_argument(where + ": expected \"left right\", got " + quoted(s));
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (ml[i].is_array() && ml[i].as_array().size() == 2 && ml[i].as_array()[0].is_string() &&
               ml[i].as_array()[1].is_string()) {
      left = ml[i].as_array()[0].as_string();
      right = ml[i].as_array()[1].as_string();
    } else {
      return invalid_argument(where + ": must be \"left right\" or [\"left\", \"right\"]");
    }
    const int32_t l = lookup(left), r = lookup(right);
    if (l < 0) return invalid_argument(where + ": token " + quoted(left) + " is not in model.vocab");
    if (r < 0) return invalid_argument(where + ": token " + quoted(right) + " is not in model.vocab");
    std::string merged = left;
    if (has_prefix) {
      if (right.compare(0, prefix.size(), prefix) != 0)
        return invalid_argument(where + ": " + quoted(right) + " lacks continuing_subword_prefix " + quoted(prefix));
      merged.append(right, prefix.size());
    } else {
      merged += right;
    }
    const int32_t m = lookup(merged);
    if (m < 0) return invalid_argument(where + ": merged token " + quoted(merged) + " is not in model.vocab");
    bpe.pairs().insert_or_assign(l, r, {static_cast<int32_t>(i), m});
  }

  // Initial symbols: each byte's character looked up as tokenizers' merge_word does.
  for (int b = 0; b < 256; ++b) {
    const std::string_view c = byte_level::char_of(static_cast<uint8_t>(b));
    for (int place = 0; place < 4; ++place) {
      const bool first = place == BpeModel::kOnly || place == BpeModel::kFirst;
      const bool last = place == BpeModel::kOnly || place == BpeModel::kLast;
      std::string s = (!first && has_prefix ? prefix : std::string()) + std::string(c) +
                      (last && has_suffix ? suffix : std::string());
      BpeModel::ByteInit init;
      if (const int32_t id = lookup(s); id >= 0) {
        init.kind = BpeModel::InitKind::kId;
        init.ids = {id};
      } else {
        if (byte_fallback) {
          init.kind = BpeModel::InitKind::kByteFallback;
          for (unsigned char ch : s) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", ch);
            const int32_t id = lookup(name);
            if (id < 0) {
              init.ids.clear();
              break;
            }
            init.ids.push_back(id);
          }
        }
        if (init.ids.empty()) init.kind = has_unk ? BpeModel::InitKind::kUnk : BpeModel::InitKind::kDrop;
      }
      bpe.set_byte_init(static_cast<BpeModel::Place>(place), static_cast<uint8_t>(b), std::move(init));
    }
  }
  bpe.set_unk(unk_id, fuse_unk);
  if (ignore_merges) {
    for (const auto& [token, id] : vocab) {
      std::string bytes;
      if (byte_level::decode(bytes, token)) bpe.add_whole_piece(std::move(bytes), id);
    }
  }
  bpe.finish();

  // Normalizer (before the added tokens: those with normalized=true are stored normalized).
  Normalizer::Form form = Normalizer::Form::kNone;
  if (const Json* n = root.find("normalizer")) YOCO_RETURN_IF_ERROR(parse_normalizer(*n, "normalizer", 0, form));
  data.normalizer = Normalizer(form);

  // Added tokens.
  if (const Json* added = root.find("added_tokens"); added && !added->is_null()) {
    if (!added->is_array()) return invalid_argument("added_tokens: must be an array");
    std::unordered_map<std::string, int32_t> seen;
    std::vector<int32_t> special_in_vocab;
    for (size_t i = 0; i < added->as_array().size(); ++i) {
      const Json& a = added->as_array()[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) return invalid_argument(where + ": must be an object");
      const Json* id_json = a.find("id");
      if (!id_json) return invalid_argument(where + ".id: missing");
      AddedToken t;
      YOCO_ASSIGN_OR_RETURN(t.id, get_id(*id_json, where + ".id"));
      bool has_content = false;
      YOCO_RETURN_IF_ERROR(get_string(a, "content", where, t.content, &has_content));
      if (!has_content || t.content.empty()) return invalid_argument(where + ".content: missing or empty");
      YOCO_RETURN_IF_ERROR(get_bool(a, "special", where, t.special));
      t.normalized = !t.special;
      YOCO_RETURN_IF_ERROR(get_bool(a, "normalized", where, t.normalized));
      YOCO_RETURN_IF_ERROR(get_bool(a, "lstrip", where, t.lstrip));
      YOCO_RETURN_IF_ERROR(get_bool(a, "rstrip", where, t.rstrip));
      YOCO_RETURN_IF_ERROR(get_bool(a, "single_word", where, t.single_word));
      if (auto [it, fresh] = seen.emplace(t.content, t.id); !fresh) {
        if (it->second != t.id)
          return invalid_argument(where + ": " + quoted(t.content) + " appears with ids " + std::to_string(it->second) +
                                  " and " + std::to_string(t.id));
        continue;
      }
      const int32_t in_vocab = lookup(t.content);
      if (in_vocab >= 0 && in_vocab != t.id)
        return invalid_argument(where + ": " + quoted(t.content) + " has id " + std::to_string(t.id) +
                                " but model.vocab gives it " + std::to_string(in_vocab));
      if (in_vocab >= 0) {
        if (t.special) special_in_vocab.push_back(t.id);
      } else {
        // tokenizers decodes a normalized=true token from its normalized content, through the
        // ByteLevel decoder like any token ("<cafe" U+0301 ">" decodes as "<caf" 0xE9 ">").
        std::string scratch;
        const std::string_view spelled = t.normalized ? data.normalizer.apply(t.content, scratch) : t.content;
        entries.push_back({t.id, t.content, decoded_bytes(std::string(spelled)), t.special});
      }
      data.added_tokens.push_back(std::move(t));
    }
    std::sort(special_in_vocab.begin(), special_in_vocab.end());
    for (TokenEntry& e : entries)
      e.special |= std::binary_search(special_in_vocab.begin(), special_in_vocab.end(), e.id);
  }
  YOCO_RETURN_IF_ERROR(fill_token_table(std::move(entries), "model.vocab + added_tokens", data));

  // Pre-tokenizer, decoder.
  std::vector<PreTokenizerStep> steps;
  bool byte_level = false;
  const Json* pre = root.find("pre_tokenizer");
  if (pre && !pre->is_null()) YOCO_RETURN_IF_ERROR(parse_pre_tokenizer(*pre, "pre_tokenizer", 0, steps, byte_level));
  if (!byte_level)
    return invalid_argument("pre_tokenizer: must end with a ByteLevel pre-tokenizer (byte-level BPE only)");
  data.pre_tokenizer = PreTokenizer(std::move(steps));
  YOCO_RETURN_IF_ERROR(check_decoder(root.find("decoder"), "decoder", 0));
  return data;
}

}  // namespace yoco
