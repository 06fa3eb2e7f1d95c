#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "tokenizer/utf8.h"

namespace yoco {
namespace {

constexpr uintmax_t kMaxTokenizerFileBytes = uintmax_t{1} << 30;

Result<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return io_error(path.string() + ": " + ec.message());
  if (size > kMaxTokenizerFileBytes) return invalid_argument(path.string() + ": file too large");
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error(path.string() + ": cannot open");
  std::string s(size, '\0');
  f.read(s.data(), static_cast<std::streamsize>(size));
  if (!f) return io_error(path.string() + ": read failed");
  return s;
}

// bos_token / eos_token: "text", {"content": "text", ...} or null/absent.
Status token_name(const Json& config, const char* key, std::string& out, bool& present) {
  present = false;
  const Json* v = config.find(key);
  if (!v || v->is_null()) return Status::Ok();
  if (v->is_object()) v = v->find("content");
  if (!v || !v->is_string())
    return invalid_argument(std::string("tokenizer_config.json: \"") + key +
                            "\" must be a string or {\"content\": string}");
  out = v->as_string();
  present = true;
  return Status::Ok();
}

}  // namespace

Tokenizer::Tokenizer(TokenizerData data) : data_(std::move(data)), added_(data_.added_tokens, data_.normalizer) {}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(std::string_view json) {
  YOCO_ASSIGN_OR_RETURN(TokenizerData data, parse_hf_tokenizer_json(json));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(data)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tiktoken(std::string_view ranks, std::string_view pattern,
                                                            const std::map<std::string, int32_t>& special_tokens) {
  YOCO_ASSIGN_OR_RETURN(TokenizerData data, parse_tiktoken(ranks, pattern, special_tokens));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(data)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("model_dir: " + model_dir + " is not a directory");
  std::optional<Json> config;
  std::string config_text;
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    YOCO_ASSIGN_OR_RETURN(config_text, read_file(dir / "tokenizer_config.json"));
    auto parsed = Json::parse(config_text);
    if (!parsed.ok()) return invalid_argument("tokenizer_config.json: " + parsed.status().message());
    if (!parsed.value().is_object()) return invalid_argument("tokenizer_config.json: top level must be an object");
    config = std::move(parsed).value();
  }

  std::unique_ptr<Tokenizer> tok;
  if (fs::exists(dir / "tokenizer.json", ec)) {
    YOCO_ASSIGN_OR_RETURN(std::string text, read_file(dir / "tokenizer.json"));
    auto t = from_hf_json(text);
    if (!t.ok()) return Status(t.status().code(), "tokenizer.json: " + t.status().message());
    tok = std::move(t).value();
  } else {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".tiktoken") found.push_back(e.path());
    if (found.empty()) return not_found("model_dir: no tokenizer.json or *.tiktoken file in " + model_dir);
    if (found.size() > 1) return invalid_argument("model_dir: more than one *.tiktoken file in " + model_dir);
    std::string pattern(kCl100kPattern);
    std::map<std::string, int32_t> specials;
    if (config) {
      if (const Json* p = config->find("tiktoken_pattern"); p && !p->is_null()) {
        if (!p->is_string()) return invalid_argument("tokenizer_config.json: \"tiktoken_pattern\" must be a string");
        pattern = p->as_string();
      }
      if (const Json* s = config->find("special_tokens"); s && !s->is_null()) {
        if (!s->is_object()) return invalid_argument("tokenizer_config.json: \"special_tokens\" must be an object");
        for (const auto& [text, id] : s->as_object()) {
          if (!id.is_integer() || id.as_int() < 0 || id.as_int() > INT32_MAX)
            return invalid_argument("tokenizer_config.json: special_tokens[\"" + text + "\"] must be an integer id");
          specials.emplace(text, static_cast<int32_t>(id.as_int()));
        }
      }
    }
    YOCO_ASSIGN_OR_RETURN(std::string ranks, read_file(found[0]));
    auto t = from_tiktoken(ranks, pattern, specials);
    if (!t.ok()) return Status(t.status().code(), found[0].filename().string() + ": " + t.status().message());
    tok = std::move(t).value();
  }
  if (config) YOCO_RETURN_IF_ERROR(tok->apply_config(config_text));
  return tok;
}

Status Tokenizer::apply_config(std::string_view config_json) {
  auto parsed = Json::parse(config_json);
  if (!parsed.ok()) return invalid_argument("tokenizer_config.json: " + parsed.status().message());
  const Json& c = parsed.value();
  if (!c.is_object()) return invalid_argument("tokenizer_config.json: top level must be an object");
  for (const char* key : {"add_bos_token", "add_eos_token"}) {
    const Json* v = c.find(key);
    if (v && !v->is_null() && !v->is_bool())
      return invalid_argument(std::string("tokenizer_config.json: \"") + key + "\" must be true or false");
  }
  std::optional<int32_t> ids[2];
  const char* keys[2] = {"bos_token", "eos_token"};
  for (int k = 0; k < 2; ++k) {
    std::string name;
    bool present = false;
    YOCO_RETURN_IF_ERROR(token_name(c, keys[k], name, present));
    if (!present) continue;
    ids[k] = token_to_id(name);
    if (!ids[k])
      return invalid_argument(std::string("tokenizer_config.json: \"") + keys[k] + "\" \"" + name +
                              "\" is not in the vocabulary");
  }
  bos_id_ = ids[0];
  eos_id_ = ids[1];
  const Json* ab = c.find("add_bos_token");
  const Json* ae = c.find("add_eos_token");
  add_bos_token_ = ab && ab->is_bool() && ab->as_bool();
  add_eos_token_ = ae && ae->is_bool() && ae->as_bool();
  if (add_bos_token_ && !bos_id_)
    return invalid_argument("tokenizer_config.json: \"add_bos_token\" is true but \"bos_token\" is not set");
  if (add_eos_token_ && !eos_id_)
    return invalid_argument("tokenizer_config.json: \"add_eos_token\" is true but \"eos_token\" is not set");
  return Status::Ok();
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  // Well-formed runs go through the regex; each run of bytes that is not well-formed UTF-8
  // (which no regex may see) is a piece of its own.
  auto emit = [&](std::string_view piece) { data_.bpe->encode_piece(piece, out); };
  const std::function<void(std::string_view)> emit_fn = emit;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    size_t j = i;
    while (j < n) {
      if (static_cast<uint8_t>(text[j]) < 0x80) {
        ++j;
        continue;
      }
      const size_t k = utf8::char_len(text, j);
      if (k == 0) break;
      j += k;
    }
    if (j > i) data_.pre_tokenizer.split(text.substr(i, j - i), emit_fn);
    size_t k = j;
    while (k < n && utf8::char_len(text, k) == 0) ++k;
    if (k > j) emit(text.substr(j, k - j));
    i = k;
  }
}

void Tokenizer::encode_to(std::string_view text, bool allow_special, bool add_bos, std::vector<int32_t>& out) const {
  out.clear();
  out.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id_) out.push_back(*bos_id_);
  if (added_.empty() && data_.normalizer.identity()) {
    encode_text(text, out);
    return;
  }
  // tokenizers' order: raw added tokens, normalize the gaps, normalized added tokens, the rest.
  std::vector<TextSegment> raw, normalized;
  added_.split_raw(text, allow_special, raw);
  std::string scratch;
  for (const TextSegment& r : raw) {
    if (r.id >= 0) {
      out.push_back(r.id);
      continue;
    }
    const std::string_view gap = data_.normalizer.apply(text.substr(r.begin, r.end - r.begin), scratch);
    normalized.clear();
    added_.split_normalized(gap, allow_special, normalized);
    for (const TextSegment& s : normalized) {
      if (s.id >= 0) {
        out.push_back(s.id);
      } else {
        encode_text(gap.substr(s.begin, s.end - s.begin), out);
      }
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special, bool add_bos) const {
  std::vector<int32_t> out;
  encode_to(text, allow_special, add_bos, out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!is_known(id)) return {};
  return std::string_view(data_.token_bytes)
      .substr(data_.token_offsets[id], data_.token_offsets[id + 1] - data_.token_offsets[id]);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out.append(token_bytes(id));
  }
  return out;
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!is_known(ids[i]))
      return invalid_argument("ids[" + std::to_string(i) + "]: unknown token id " + std::to_string(ids[i]) +
                              " (vocab_size " + std::to_string(vocab_size()) + ")");
  }
  return Status::Ok();
}

Result<std::string> Tokenizer::decode_checked(std::span<const int32_t> ids, bool skip_special) const {
  YOCO_RETURN_IF_ERROR(check_ids(ids));
  return decode(ids, skip_special);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = data_.token_ids.find(std::string(token));
  if (it == data_.token_ids.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (!is_known(id)) return std::nullopt;
  return data_.token_text[id];
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_.append(tokenizer_.token_bytes(id));
  const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out;
  utf8::append_lossy(out, std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace yoco
