// What the KV store keeps (docs/design.md §5): self-describing objects (header + payload), the hash chain
// that names K/V blocks, and the document record. Backends never parse any of this; they move
// opaque bytes. Every decode is bounds-checked: hostile or corrupted bytes give a Status, never
// a crash or a wrong answer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "handoff/kv_rows.h"
#include "handoff/prefix_chain.h"

namespace yoco {

// Object header, little-endian, kObjectHeaderBytes long:
//   magic "YOCOKVS1", u32 format version, u32 kind, u64 model fingerprint, u32 dtype,
//   u32 ndims, u64 dims[4] (unused = 0), u64 payload bytes, i64 expiry unix ms (0 = none),
//   u32 CRC32C of the payload, u32 CRC32C of the header bytes before it.
constexpr uint32_t kObjectFormatVersion = 1;
constexpr size_t kObjectHeaderBytes = 88;
constexpr int kObjectMaxDims = 4;

enum class ObjectKind : uint32_t { kKvBlock = 1, kStateSnapshot = 2, kDocument = 3 };
// 0 and 1 match KvDType (handoff/kv_rows.h); opaque payloads (state blobs, records) are bytes.
enum class ObjectDType : uint32_t { kF32 = 0, kBF16 = 1, kBytes = 2 };

const char* object_kind_name(ObjectKind k);

struct Object {
  ObjectKind kind = ObjectKind::kKvBlock;
  uint64_t fingerprint = 0;
  ObjectDType dtype = ObjectDType::kBytes;
  std::vector<uint64_t> dims;  // kv block: {rows, kv_dim}; opaque: {payload bytes}
  int64_t expiry_ms = 0;
  std::string payload;
};

int64_t unix_ms_now();

// dims must match the payload (see decode_object); the caller's bug otherwise (YOCO_CHECK).
std::string encode_object(const Object& obj);

// Validates in this order, each failure naming the field: length (DATA_LOSS "truncated"),
// magic, header CRC (DATA_LOSS), version (FAILED_PRECONDITION), kind (DATA_LOSS), fingerprint
// (FAILED_PRECONDITION), dtype/ndims/dims against the payload length (DATA_LOSS), payload CRC
// (DATA_LOSS), expiry (NOT_FOUND "expired"). now_ms = 0: the current time.
Result<Object> decode_object(std::string_view bytes, ObjectKind expected_kind, uint64_t expected_fingerprint,
                             int64_t now_ms = 0);

// ---- K/V blocks: canonical layout K rows [rows, kv_dim] then V rows [rows, kv_dim] ----------
// bf16 rounds to nearest even (handoff/kv_rows.h).
std::string encode_kv_block(const float* k_rows, const float* v_rows, int64_t rows, int kv_dim, KvDType dtype,
                            uint64_t fingerprint, int64_t expiry_ms);
// As above with rows gathered one at a time (paged pools): row(r) -> {k, v} pointers.
template <class RowFn>
std::string encode_kv_block_rows(RowFn&& row, int64_t rows, int kv_dim, KvDType dtype, uint64_t fingerprint,
                                 int64_t expiry_ms);
// Checks the shape against the expectation (DATA_LOSS naming the dimension) and writes
// rows·kv_dim floats to each of k_out and v_out.
Status decode_kv_block(const Object& obj, int64_t expected_rows, int kv_dim, float* k_out, float* v_out);

// ---- Keys: the prefix hash chain (handoff/prefix_chain.h) names blocks and states ----------
// Store keys of the three object kinds.
std::string block_store_key(const BlockKey& k);  // "kv:" + hex
std::string state_store_key(const BlockKey& k);  // "state:" + hex
// Where the state after all of `tokens` lives: their prefix_key (the last full block's key, or
// the key of the trailing partial block chained onto it; empty tokens: the root).
inline BlockKey state_key_for(std::span<const int32_t> tokens, int block_tokens, uint64_t fingerprint) {
  return prefix_key(tokens, block_tokens, fingerprint);
}
// Content-addressed document id: "doc-" + 32 hex; same tokens, model and owner, same id. The
// owner (the API key's name, docs/design.md §9b) is hashed in only when set, so documents cached
// without keys keep their ids, and two tenants caching the same text get two documents.
std::string document_id(std::span<const int32_t> tokens, uint64_t fingerprint, std::string_view owner = {});
std::string fingerprint_hex(uint64_t fingerprint);  // 16 hex chars

// ---- Document record (kind 3, a JSON payload) -----------------------------------------------
struct DocumentRecord {
  std::string id;
  std::vector<int32_t> tokens;  // to rebuild prompts
  int block_tokens = 0;
  std::vector<BlockKey> block_keys;  // the full blocks, in order
  BlockKey state_key;                // state after all tokens (state_key_for)
  uint64_t fingerprint = 0;
  int64_t created_ms = 0;
  int64_t ttl_s = 0;         // 0: no expiry
  int64_t stored_bytes = 0;  // blocks + state + record as written
  std::string owner;         // the API key name that cached it; "" without keys (and in version 1 records)
};
// The record's JSON "version": 2 added "owner"; a record without "version" is version 1.
constexpr int64_t kDocumentRecordVersion = 2;

std::string document_to_json(const DocumentRecord& r);
// Validates every field and its consistency (id vs tokens, key count vs token count, the keys
// themselves): DATA_LOSS naming the field.
Result<DocumentRecord> document_from_json(std::string_view json, uint64_t expected_fingerprint);

// ---- template implementation ----------------------------------------------------------------
namespace kv_format_detail {
void put_row(std::string& out, size_t offset, const float* row, int kv_dim, KvDType dtype);
std::string kv_block_header_and_space(int64_t rows, int kv_dim, KvDType dtype, uint64_t fingerprint, int64_t expiry_ms);
void seal_object(std::string& bytes);  // fills both CRCs
}  // namespace kv_format_detail

template <class RowFn>
std::string encode_kv_block_rows(RowFn&& row, int64_t rows, int kv_dim, KvDType dtype, uint64_t fingerprint,
                                 int64_t expiry_ms) {
  std::string out = kv_format_detail::kv_block_header_and_space(rows, kv_dim, dtype, fingerprint, expiry_ms);
  const size_t elem = dtype == KvDType::kBF16 ? 2 : 4;
  const size_t row_bytes = static_cast<size_t>(kv_dim) * elem;
  const size_t v_base = kObjectHeaderBytes + static_cast<size_t>(rows) * row_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    auto [k, v] = row(r);
    kv_format_detail::put_row(out, kObjectHeaderBytes + r * row_bytes, k, kv_dim, dtype);
    kv_format_detail::put_row(out, v_base + r * row_bytes, v, kv_dim, dtype);
  }
  kv_format_detail::seal_object(out);
  return out;
}

}  // namespace yoco
