#include "kv_store/format.h"

#include <chrono>
#include <cstring>
#include <limits>

#include "common/checksum.h"
#include "common/json.h"
#include "handoff/bytes.h"

namespace yoco {

namespace {

constexpr char kMagic[8] = {'Y', 'O', 'C', 'O', 'K', 'V', 'S', '1'};
// Header field offsets.
constexpr size_t kOffVersion = 8, kOffKind = 12, kOffFingerprint = 16, kOffDType = 24, kOffNDims = 28, kOffDims = 32,
                 kOffPayloadBytes = 64, kOffExpiry = 72, kOffPayloadCrc = 80, kOffHeaderCrc = 84;
static_assert(kOffHeaderCrc + 4 == kObjectHeaderBytes);

// Sizes a block may have: far above any model, far below overflow.
constexpr uint64_t kMaxKvDim = 1u << 20;
constexpr uint64_t kMaxBlockRows = 1u << 20;

size_t elem_bytes(ObjectDType d) { return d == ObjectDType::kF32 ? 4 : d == ObjectDType::kBF16 ? 2 : 1; }

std::string write_header(const Object& obj, uint64_t payload_bytes) {
  YOCO_CHECK(obj.dims.size() <= static_cast<size_t>(kObjectMaxDims));
  std::string h(kObjectHeaderBytes, '\0');
  std::memcpy(h.data(), kMagic, 8);
  store_le<uint32_t>(h.data() + kOffVersion, kObjectFormatVersion);
  store_le<uint32_t>(h.data() + kOffKind, static_cast<uint32_t>(obj.kind));
  store_le<uint64_t>(h.data() + kOffFingerprint, obj.fingerprint);
  store_le<uint32_t>(h.data() + kOffDType, static_cast<uint32_t>(obj.dtype));
  store_le<uint32_t>(h.data() + kOffNDims, static_cast<uint32_t>(obj.dims.size()));
  for (size_t i = 0; i < obj.dims.size(); ++i) store_le<uint64_t>(h.data() + kOffDims + 8 * i, obj.dims[i]);
  store_le<uint64_t>(h.data() + kOffPayloadBytes, payload_bytes);
  store_le<uint64_t>(h.data() + kOffExpiry, static_cast<uint64_t>(obj.expiry_ms));
  return h;
}

// Payload bytes the header's shape implies, or a Status naming the bad field.
Result<uint64_t> shape_bytes(ObjectKind kind, ObjectDType dtype, std::span<const uint64_t> dims) {
  if (kind == ObjectKind::kKvBlock) {
    if (dtype != ObjectDType::kF32 && dtype != ObjectDType::kBF16)
      return data_loss("kv block: dtype " + std::to_string(static_cast<uint32_t>(dtype)) + " is not f32 or bf16");
    if (dims.size() != 2) return data_loss("kv block: ndims " + std::to_string(dims.size()) + " != 2");
    if (dims[0] == 0 || dims[0] > kMaxBlockRows)
      return data_loss("kv block: rows " + std::to_string(dims[0]) + " out of range");
    if (dims[1] == 0 || dims[1] > kMaxKvDim)
      return data_loss("kv block: kv_dim " + std::to_string(dims[1]) + " out of range");
    return 2 * dims[0] * dims[1] * elem_bytes(dtype);
  }
  if (dtype != ObjectDType::kBytes)
    return data_loss(std::string(object_kind_name(kind)) + ": dtype " + std::to_string(static_cast<uint32_t>(dtype)) +
                     " is not bytes");
  if (dims.size() != 1)
    return data_loss(std::string(object_kind_name(kind)) + ": ndims " + std::to_string(dims.size()) + " != 1");
  return dims[0];
}

bool parse_hex64(std::string_view s, uint64_t& out) {
  if (s.size() != 16) return false;
  out = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    out = (out << 4) | static_cast<uint64_t>(d);
  }
  return true;
}

bool parse_key_hex(std::string_view s, BlockKey& k) {
  return s.size() == 32 && parse_hex64(s.substr(0, 16), k.a) && parse_hex64(s.substr(16), k.b);
}

}  // namespace

const char* object_kind_name(ObjectKind k) {
  switch (k) {
    case ObjectKind::kKvBlock:
      return "kv block";
    case ObjectKind::kStateSnapshot:
      return "state snapshot";
    case ObjectKind::kDocument:
      return "document";
  }
  return "unknown kind";
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace kv_format_detail {

void seal_object(std::string& bytes) {
  YOCO_CHECK(bytes.size() >= kObjectHeaderBytes);
  const uint32_t payload_crc = crc32c(bytes.data() + kObjectHeaderBytes, bytes.size() - kObjectHeaderBytes);
  store_le<uint32_t>(bytes.data() + kOffPayloadCrc, payload_crc);
  store_le<uint32_t>(bytes.data() + kOffHeaderCrc, crc32c(bytes.data(), kOffHeaderCrc));
}

std::string kv_block_header_and_space(int64_t rows, int kv_dim, KvDType dtype, uint64_t fingerprint,
                                      int64_t expiry_ms) {
  YOCO_CHECK(rows > 0 && kv_dim > 0);
  Object o;
  o.kind = ObjectKind::kKvBlock;
  o.fingerprint = fingerprint;
  o.dtype = dtype == KvDType::kBF16 ? ObjectDType::kBF16 : ObjectDType::kF32;
  o.dims = {static_cast<uint64_t>(rows), static_cast<uint64_t>(kv_dim)};
  o.expiry_ms = expiry_ms;
  const uint64_t payload = 2 * static_cast<uint64_t>(rows) * kv_dim * elem_bytes(o.dtype);
  std::string out = write_header(o, payload);
  out.resize(kObjectHeaderBytes + payload);
  return out;
}

void put_row(std::string& out, size_t offset, const float* row, int kv_dim, KvDType dtype) {
  encode_kv_values(row, kv_dim, dtype, reinterpret_cast<uint8_t*>(out.data() + offset));
}

}  // namespace kv_format_detail

std::string encode_object(const Object& obj) {
  auto expect = shape_bytes(obj.kind, obj.dtype, obj.dims);
  YOCO_CHECK(expect.ok() && *expect == obj.payload.size());
  std::string out = write_header(obj, obj.payload.size());
  out += obj.payload;
  kv_format_detail::seal_object(out);
  return out;
}

Result<Object> decode_object(std::string_view bytes, ObjectKind expected_kind, uint64_t expected_fingerprint,
                             int64_t now_ms) {
  if (bytes.size() < kObjectHeaderBytes)
    return data_loss("kv object truncated: " + std::to_string(bytes.size()) + " bytes, header needs " +
                     std::to_string(kObjectHeaderBytes));
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return data_loss("kv object: bad magic (not a YOCOKVS1 object)");
  if (crc32c(bytes.data(), kOffHeaderCrc) != load_le<uint32_t>(bytes.data() + kOffHeaderCrc))
    return data_loss("kv object: header checksum mismatch");
  const uint32_t version = load_le<uint32_t>(bytes.data() + kOffVersion);
  if (version != kObjectFormatVersion)
    return failed_precondition("kv object: format version " + std::to_string(version) + " (this build reads " +
                               std::to_string(kObjectFormatVersion) + ")");
  const uint32_t kind = load_le<uint32_t>(bytes.data() + kOffKind);
  if (kind != static_cast<uint32_t>(expected_kind))
    return data_loss("kv object: kind " + std::to_string(kind) + ", expected " +
                     std::to_string(static_cast<uint32_t>(expected_kind)) + " (" + object_kind_name(expected_kind) +
                     ")");
  Object obj;
  obj.kind = expected_kind;
  obj.fingerprint = load_le<uint64_t>(bytes.data() + kOffFingerprint);
  if (obj.fingerprint != expected_fingerprint)
    return failed_precondition("kv object: model fingerprint " + fingerprint_hex(obj.fingerprint) +
                               " != " + fingerprint_hex(expected_fingerprint));
  const uint32_t dtype = load_le<uint32_t>(bytes.data() + kOffDType);
  if (dtype > static_cast<uint32_t>(ObjectDType::kBytes))
    return data_loss("kv object: unknown dtype " + std::to_string(dtype));
  obj.dtype = static_cast<ObjectDType>(dtype);
  const uint32_t ndims = load_le<uint32_t>(bytes.data() + kOffNDims);
  if (ndims == 0 || ndims > static_cast<uint32_t>(kObjectMaxDims))
    return data_loss("kv object: ndims " + std::to_string(ndims) + " not in [1, 4]");
  for (uint32_t i = 0; i < static_cast<uint32_t>(kObjectMaxDims); ++i) {
    const uint64_t d = load_le<uint64_t>(bytes.data() + kOffDims + 8 * i);
    if (i < ndims) {
      obj.dims.push_back(d);
    } else if (d != 0) {
      return data_loss("kv object: unused dims[" + std::to_string(i) + "] is not zero");
    }
  }
  const uint64_t payload_bytes = load_le<uint64_t>(bytes.data() + kOffPayloadBytes);
  auto expect = shape_bytes(obj.kind, obj.dtype, obj.dims);
  if (!expect.ok()) return expect.status();
  if (*expect != payload_bytes)
    return data_loss("kv object: dims imply " + std::to_string(*expect) + " payload bytes, header says " +
                     std::to_string(payload_bytes));
  const uint64_t have = bytes.size() - kObjectHeaderBytes;
  if (payload_bytes != have)
    return data_loss(std::string("kv object: payload ") + (have < payload_bytes ? "truncated" : "has trailing bytes") +
                     ": " + std::to_string(have) + " bytes, header says " + std::to_string(payload_bytes));
  const std::string_view payload = bytes.substr(kObjectHeaderBytes);
  if (crc32c(payload.data(), payload.size()) != load_le<uint32_t>(bytes.data() + kOffPayloadCrc))
    return data_loss("kv object: payload checksum mismatch");
  obj.expiry_ms = static_cast<int64_t>(load_le<uint64_t>(bytes.data() + kOffExpiry));
  if (obj.expiry_ms < 0) return data_loss("kv object: negative expiry");
  if (obj.expiry_ms != 0 && obj.expiry_ms <= (now_ms ? now_ms : unix_ms_now()))
    return not_found("kv object: expired at unix ms " + std::to_string(obj.expiry_ms));
  obj.payload.assign(payload);
  return obj;
}

std::string encode_kv_block(const float* k_rows, const float* v_rows, int64_t rows, int kv_dim, KvDType dtype,
                            uint64_t fingerprint, int64_t expiry_ms) {
  return encode_kv_block_rows(
      [&](int64_t r) {
        return std::pair<const float*, const float*>{k_rows + r * kv_dim, v_rows + r * kv_dim};
      },
      rows, kv_dim, dtype, fingerprint, expiry_ms);
}

Status decode_kv_block(const Object& obj, int64_t expected_rows, int kv_dim, float* k_out, float* v_out) {
  if (obj.kind != ObjectKind::kKvBlock || obj.dims.size() != 2) return data_loss("kv block: not a block object");
  if (obj.dims[0] != static_cast<uint64_t>(expected_rows))
    return data_loss("kv block: rows " + std::to_string(obj.dims[0]) + " != block size " +
                     std::to_string(expected_rows));
  if (obj.dims[1] != static_cast<uint64_t>(kv_dim))
    return data_loss("kv block: kv_dim " + std::to_string(obj.dims[1]) + " != model kv_dim " + std::to_string(kv_dim));
  const size_t n = static_cast<size_t>(expected_rows) * kv_dim;
  if (obj.payload.size() != 2 * n * elem_bytes(obj.dtype))
    return data_loss("kv block: payload size does not match dims");
  if (obj.dtype != ObjectDType::kF32 && obj.dtype != ObjectDType::kBF16)
    return data_loss("kv block: dtype is not f32 or bf16");
  const KvDType dtype = obj.dtype == ObjectDType::kBF16 ? KvDType::kBF16 : KvDType::kF32;
  const auto* p = reinterpret_cast<const uint8_t*>(obj.payload.data());
  decode_kv_values(p, static_cast<int64_t>(n), dtype, k_out);
  decode_kv_values(p + n * kv_dtype_bytes(dtype), static_cast<int64_t>(n), dtype, v_out);
  return Status::Ok();
}

std::string block_store_key(const BlockKey& k) { return "kv:" + k.hex(); }
std::string state_store_key(const BlockKey& k) { return "state:" + k.hex(); }

std::string document_id(std::span<const int32_t> tokens, uint64_t fingerprint, std::string_view owner) {
  ByteWriter w(24 + 4 * tokens.size() + (owner.empty() ? 0 : 8 + owner.size()));
  w.put_raw("yoco-doc", 8);
  w.put<uint64_t>(fingerprint);
  w.put<uint64_t>(tokens.size());
  for (int32_t t : tokens) w.put<uint32_t>(static_cast<uint32_t>(t));
  if (!owner.empty()) {
    w.put<uint64_t>(owner.size());
    w.put_raw(owner.data(), owner.size());
  }
  return "doc-" + hash128(w.bytes()).hex();
}

std::string fingerprint_hex(uint64_t fingerprint) { return hex64(fingerprint); }

std::string document_to_json(const DocumentRecord& r) {
  Json::Array tokens, keys;
  tokens.reserve(r.tokens.size());
  for (int32_t t : r.tokens) tokens.emplace_back(static_cast<int64_t>(t));
  for (const auto& k : r.block_keys) keys.emplace_back(k.hex());
  Json::Object o;
  o["id"] = r.id;
  o["token_count"] = static_cast<int64_t>(r.tokens.size());
  o["tokens"] = std::move(tokens);
  o["block_tokens"] = r.block_tokens;
  o["block_keys"] = std::move(keys);
  o["state_key"] = r.state_key.hex();
  o["fingerprint"] = fingerprint_hex(r.fingerprint);
  o["created_ms"] = r.created_ms;
  o["ttl_s"] = r.ttl_s;
  o["stored_bytes"] = r.stored_bytes;
  o["version"] = kDocumentRecordVersion;
  o["owner"] = r.owner;
  return Json(std::move(o)).dump();
}

Result<DocumentRecord> document_from_json(std::string_view json, uint64_t expected_fingerprint) {
  auto parsed = Json::parse(json, 8);
  if (!parsed.ok()) return data_loss("document record: " + parsed.status().message());
  const Json& j = *parsed;
  if (!j.is_object()) return data_loss("document record: not a JSON object");
  auto field = [&](const char* name, bool (Json::*is)() const) -> Result<const Json*> {
    const Json* f = j.find(name);
    if (!f || !(f->*is)()) return data_loss(std::string("document record: field '") + name + "' missing or mistyped");
    return f;
  };
  auto int_field = [&](const char* name, int64_t lo, int64_t hi) -> Result<int64_t> {
    YOCO_ASSIGN_OR_RETURN(const Json* f, field(name, &Json::is_integer));
    if (f->as_int() < lo || f->as_int() > hi)
      return data_loss(std::string("document record: field '") + name + "' out of range");
    return f->as_int();
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  DocumentRecord r;
  YOCO_ASSIGN_OR_RETURN(const Json* id, field("id", &Json::is_string));
  r.id = id->as_string();
  YOCO_ASSIGN_OR_RETURN(const Json* fp, field("fingerprint", &Json::is_string));
  if (!parse_hex64(fp->as_string(), r.fingerprint))
    return data_loss("document record: field 'fingerprint' is not 16 hex chars");
  if (r.fingerprint != expected_fingerprint)
    return failed_precondition("document record: model fingerprint " + fp->as_string() +
                               " != " + fingerprint_hex(expected_fingerprint));
  YOCO_ASSIGN_OR_RETURN(const Json* tokens, field("tokens", &Json::is_array));
  r.tokens.reserve(tokens->as_array().size());
  for (const Json& t : tokens->as_array()) {
    if (!t.is_integer() || t.as_int() < 0 || t.as_int() > std::numeric_limits<int32_t>::max())
      return data_loss("document record: field 'tokens' holds a non-token value");
    r.tokens.push_back(static_cast<int32_t>(t.as_int()));
  }
  YOCO_ASSIGN_OR_RETURN(int64_t count, int_field("token_count", 0, kMax));
  if (count != static_cast<int64_t>(r.tokens.size()))
    return data_loss("document record: field 'token_count' " + std::to_string(count) +
                     " != " + std::to_string(r.tokens.size()) + " tokens");
  YOCO_ASSIGN_OR_RETURN(int64_t bt, int_field("block_tokens", 1, 1 << 20));
  r.block_tokens = static_cast<int>(bt);
  YOCO_ASSIGN_OR_RETURN(const Json* keys, field("block_keys", &Json::is_array));
  for (const Json& k : keys->as_array()) {
    BlockKey bk;
    if (!k.is_string() || !parse_key_hex(k.as_string(), bk))
      return data_loss("document record: field 'block_keys' holds a bad key");
    r.block_keys.push_back(bk);
  }
  YOCO_ASSIGN_OR_RETURN(const Json* sk, field("state_key", &Json::is_string));
  if (!parse_key_hex(sk->as_string(), r.state_key)) return data_loss("document record: field 'state_key' is not a key");
  YOCO_ASSIGN_OR_RETURN(r.created_ms, int_field("created_ms", 0, kMax));
  YOCO_ASSIGN_OR_RETURN(r.ttl_s, int_field("ttl_s", 0, kMax));
  YOCO_ASSIGN_OR_RETURN(r.stored_bytes, int_field("stored_bytes", 0, kMax));
  if (j.find("version")) {  // version 1 records have neither field: owner ""
    YOCO_ASSIGN_OR_RETURN(int64_t version, int_field("version", 1, kDocumentRecordVersion));
    if (version >= 2) {
      YOCO_ASSIGN_OR_RETURN(const Json* owner, field("owner", &Json::is_string));
      r.owner = owner->as_string();
    }
  }
  // Everything derived from the tokens must agree with them.
  if (r.id != document_id(r.tokens, r.fingerprint, r.owner))
    return data_loss("document record: field 'id' does not match the tokens");
  if (r.block_keys != chain_keys(r.tokens, r.block_tokens, r.fingerprint))
    return data_loss("document record: field 'block_keys' does not match the tokens");
  if (r.state_key != state_key_for(r.tokens, r.block_tokens, r.fingerprint))
    return data_loss("document record: field 'state_key' does not match the tokens");
  return r;
}

}  // namespace yoco
