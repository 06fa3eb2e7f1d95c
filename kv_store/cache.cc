#include "kv_store/cache.h"

#include <algorithm>
#include <cstring>

#include "common/document_id.h"

namespace yoco {

KvCache::KvCache(KvStore& store, KvCacheOptions opt) : store_(store), opt_(opt) {
  YOCO_CHECK(opt_.kv_dim > 0 && opt_.block_tokens > 0 && opt_.lookup_batch > 0);
}

std::string KvCache::index_set() const { return "docs:" + fingerprint_hex(opt_.fingerprint); }

int64_t KvCache::expiry_for(std::chrono::seconds ttl) const {
  return ttl.count() > 0 ? unix_ms_now() + ttl.count() * 1000 : 0;
}

std::optional<Object> KvCache::check(const KvGetResult& got, const std::string& key, ObjectKind kind) {
  if (!got.ok()) {
    stats_.error();
    return std::nullopt;
  }
  if (!got.value().has_value()) {
    stats_.miss();
    return std::nullopt;
  }
  auto obj = decode_object(*got.value(), kind, opt_.fingerprint);
  Status bad = obj.status();
  if (bad.ok() && kind == ObjectKind::kKvBlock &&
      (obj->dims[0] != static_cast<uint64_t>(opt_.block_tokens) || obj->dims[1] != static_cast<uint64_t>(opt_.kv_dim)))
    bad = data_loss("kv block: shape does not match this cache's block size and kv_dim");
  if (bad.ok()) {
    stats_.hit(got.value()->size());
    return std::move(obj).value();
  }
  // Expired is a plain miss; anything else is damage. Either way the object goes.
  if (bad.code() != StatusCode::kNotFound) stats_.corrupt();
  stats_.miss();
  (void)store_.del(key);
  return std::nullopt;
}

template <class RowFn>
Status KvCache::write_blocks_impl(std::span<const int32_t> tokens, RowFn&& row, int64_t first_block, int64_t n_blocks,
                                  std::chrono::seconds ttl) {
  const int64_t B = opt_.block_tokens;
  if (first_block < 0 || n_blocks < 0 || (first_block + n_blocks) * B > static_cast<int64_t>(tokens.size()))
    return invalid_argument("write_blocks: blocks [" + std::to_string(first_block) + ", " +
                            std::to_string(first_block + n_blocks) + ") exceed the " + std::to_string(tokens.size()) +
                            " tokens");
  if (n_blocks == 0) return Status::Ok();
  const auto keys =
      chain_keys(tokens.first(static_cast<size_t>((first_block + n_blocks) * B)), opt_.block_tokens, opt_.fingerprint);
  const int64_t expiry = expiry_for(ttl);
  for (int64_t i = first_block; i < first_block + n_blocks; ++i) {
    const std::string bytes = encode_kv_block_rows([&](int64_t r) { return row(i * B + r); }, B, opt_.kv_dim,
                                                   opt_.dtype, opt_.fingerprint, expiry);
    Status st = store_.put(block_store_key(keys[i]), bytes, ttl);
    if (!st.ok()) {
      stats_.error();
      return st;
    }
    stats_.written(bytes.size());
  }
  return Status::Ok();
}

Status KvCache::write_blocks(std::span<const int32_t> tokens, const float* k_rows, const float* v_rows,
                             int64_t first_block, int64_t n_blocks, std::chrono::seconds ttl) {
  const int64_t d = opt_.kv_dim;
  return write_blocks_impl(
      tokens,
      [&](int64_t r) {
        return std::pair<const float*, const float*>{k_rows + r * d, v_rows + r * d};
      },
      first_block, n_blocks, ttl);
}

Status KvCache::write_blocks(std::span<const int32_t> tokens, const KvRowFn& row, int64_t first_block, int64_t n_blocks,
                             std::chrono::seconds ttl) {
  return write_blocks_impl(tokens, row, first_block, n_blocks, ttl);
}

int64_t KvCache::walk(std::span<const BlockKey> keys, KvRows* out, Status* first_error) {
  const size_t rows_per_block = static_cast<size_t>(opt_.block_tokens) * opt_.kv_dim;
  int64_t found = 0;
  for (size_t start = 0; start < keys.size(); start += opt_.lookup_batch) {
    const size_t end = std::min(keys.size(), start + static_cast<size_t>(opt_.lookup_batch));
    std::vector<std::string> skeys;
    for (size_t i = start; i < end; ++i) skeys.push_back(block_store_key(keys[i]));
    std::vector<KvGetResult> got = store_.get_many(skeys);
    for (size_t j = 0; j < skeys.size(); ++j) {
      if (!got[j].ok() && first_error && first_error->ok()) *first_error = got[j].status();
      auto obj = check(got[j], skeys[j], ObjectKind::kKvBlock);
      if (!obj) return found;
      if (out) {
        out->k.resize((found + 1) * rows_per_block);
        out->v.resize((found + 1) * rows_per_block);
        Status st = decode_kv_block(*obj, opt_.block_tokens, opt_.kv_dim, out->k.data() + found * rows_per_block,
                                    out->v.data() + found * rows_per_block);
        if (!st.ok()) {  // unreachable after check(); kept so a format change cannot slip through
          out->k.resize(found * rows_per_block);
          out->v.resize(found * rows_per_block);
          stats_.corrupt();
          (void)store_.del(skeys[j]);
          return found;
        }
      }
      ++found;
    }
  }
  return found;
}

int64_t KvCache::longest_cached_prefix(std::span<const int32_t> tokens, int64_t max_blocks) {
  auto keys = chain_keys(tokens, opt_.block_tokens, opt_.fingerprint);
  if (max_blocks >= 0 && static_cast<int64_t>(keys.size()) > max_blocks) keys.resize(static_cast<size_t>(max_blocks));
  return walk(keys, nullptr, nullptr);
}

Result<KvRows> KvCache::read_blocks(std::span<const BlockKey> keys) {
  KvRows rows;
  Status err;
  const int64_t found = walk(keys, &rows, &err);
  if (found == static_cast<int64_t>(keys.size())) return rows;
  if (!err.ok()) return err;
  return not_found("kv block " + std::to_string(found) + " (" + keys[found].hex() + ") missing or damaged");
}

Status KvCache::put_state(const BlockKey& at, std::span<const uint8_t> blob, std::chrono::seconds ttl) {
  Object o;
  o.kind = ObjectKind::kStateSnapshot;
  o.fingerprint = opt_.fingerprint;
  o.dtype = ObjectDType::kBytes;
  o.dims = {blob.size()};
  o.expiry_ms = expiry_for(ttl);
  o.payload.assign(reinterpret_cast<const char*>(blob.data()), blob.size());
  const std::string bytes = encode_object(o);
  Status st = store_.put(state_store_key(at), bytes, ttl);
  if (!st.ok()) {
    stats_.error();
    return st;
  }
  stats_.written(bytes.size());
  return Status::Ok();
}

Result<std::optional<std::vector<uint8_t>>> KvCache::get_state(const BlockKey& at) {
  const std::string key = state_store_key(at);
  KvGetResult got = store_.get(key);
  auto obj = check(got, key, ObjectKind::kStateSnapshot);
  if (!obj) {
    if (!got.ok()) return got.status();
    return std::optional<std::vector<uint8_t>>();
  }
  return std::optional<std::vector<uint8_t>>(std::vector<uint8_t>(obj->payload.begin(), obj->payload.end()));
}

CachedPrefix KvCache::load_prefix(std::span<const int32_t> tokens, int64_t max_blocks, int64_t skip_blocks) {
  CachedPrefix p;
  auto keys = chain_keys(tokens, opt_.block_tokens, opt_.fingerprint);
  if (max_blocks >= 0 && static_cast<int64_t>(keys.size()) > max_blocks) keys.resize(static_cast<size_t>(max_blocks));
  const int64_t skip = std::clamp<int64_t>(skip_blocks, 0, static_cast<int64_t>(keys.size()));
  KvRows rows;
  rows.k.assign(static_cast<size_t>(skip) * opt_.block_tokens * opt_.kv_dim, 0.0f);
  rows.v.assign(rows.k.size(), 0.0f);
  KvRows read;
  const int64_t found = skip + walk(std::span<const BlockKey>(keys).subspan(skip), &read, nullptr);
  rows.k.insert(rows.k.end(), read.k.begin(), read.k.end());
  rows.v.insert(rows.v.end(), read.v.begin(), read.v.end());
  // The deepest block end with a state snapshot, searched downwards in batches.
  for (int64_t hi = found; hi >= 1; hi -= opt_.lookup_batch) {
    const int64_t lo = std::max<int64_t>(1, hi - opt_.lookup_batch + 1);
    std::vector<std::string> skeys;
    for (int64_t j = hi; j >= lo; --j) skeys.push_back(state_store_key(keys[j - 1]));
    std::vector<KvGetResult> got = store_.get_many(skeys);
    for (size_t i = 0; i < skeys.size(); ++i) {
      auto obj = check(got[i], skeys[i], ObjectKind::kStateSnapshot);
      if (!obj) continue;
      const int64_t blocks = hi - static_cast<int64_t>(i);
      const size_t n = static_cast<size_t>(blocks) * opt_.block_tokens * opt_.kv_dim;
      rows.k.resize(n);
      rows.v.resize(n);
      p.blocks = blocks;
      p.tokens = blocks * opt_.block_tokens;
      p.k = std::move(rows.k);
      p.v = std::move(rows.v);
      p.state.assign(obj->payload.begin(), obj->payload.end());
      return p;
    }
  }
  return p;
}

DocumentRecord KvCache::make_document(std::span<const int32_t> tokens, std::chrono::seconds ttl,
                                      const std::string& owner) const {
  DocumentRecord r;
  r.owner = owner;
  r.id = document_id(tokens, opt_.fingerprint, owner);
  r.tokens.assign(tokens.begin(), tokens.end());
  r.block_tokens = opt_.block_tokens;
  r.block_keys = chain_keys(tokens, opt_.block_tokens, opt_.fingerprint);
  r.state_key = state_key_for(tokens, opt_.block_tokens, opt_.fingerprint);
  r.fingerprint = opt_.fingerprint;
  r.created_ms = unix_ms_now();
  r.ttl_s = ttl.count();
  return r;
}

Status KvCache::put_document(const DocumentRecord& record) {
  if (record.fingerprint != opt_.fingerprint) return invalid_argument("put_document: record is for another model");
  Object o;
  o.kind = ObjectKind::kDocument;
  o.fingerprint = opt_.fingerprint;
  o.dtype = ObjectDType::kBytes;
  o.payload = document_to_json(record);
  o.dims = {o.payload.size()};
  o.expiry_ms = record.ttl_s > 0 ? record.created_ms + record.ttl_s * 1000 : 0;
  const std::string bytes = encode_object(o);
  const std::chrono::seconds ttl(record.ttl_s);
  Status st = store_.put(record.id, bytes, ttl);
  if (st.ok()) st = store_.set_add(index_set(), record.id);
  if (!st.ok()) {
    stats_.error();
    return st;
  }
  stats_.written(bytes.size());
  return Status::Ok();
}

Result<std::optional<DocumentRecord>> KvCache::get_document(const std::string& id) {
  // Never a store key (nor a dir store path) from a string that is not an id.
  if (!is_document_id(id)) return invalid_argument(not_a_document_id("id", id));
  KvGetResult got = store_.get(id);
  auto obj = check(got, id, ObjectKind::kDocument);
  if (!obj) {
    if (!got.ok()) return got.status();
    return std::optional<DocumentRecord>();
  }
  auto rec = document_from_json(obj->payload, opt_.fingerprint);
  if (!rec.ok() || rec->id != id) {
    stats_.corrupt();
    (void)store_.del(id);
    return std::optional<DocumentRecord>();
  }
  return std::optional<DocumentRecord>(std::move(rec).value());
}

Result<std::vector<std::string>> KvCache::list_documents() {
  YOCO_ASSIGN_OR_RETURN(std::vector<std::string> ids, store_.set_members(index_set()));
  std::vector<std::string> alive;
  for (size_t start = 0; start < ids.size(); start += opt_.lookup_batch) {
    const size_t end = std::min(ids.size(), start + static_cast<size_t>(opt_.lookup_batch));
    std::vector<std::string> batch(ids.begin() + start, ids.begin() + end);
    std::vector<KvGetResult> got = store_.get_many(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!got[i].ok()) {  // unknown: keep it listed
        alive.push_back(batch[i]);
        continue;
      }
      bool ok = got[i]->has_value();
      if (ok) {
        auto obj = decode_object(**got[i], ObjectKind::kDocument, opt_.fingerprint);
        ok = obj.ok();
      }
      if (ok) alive.push_back(batch[i]);
      else (void)store_.set_remove(index_set(), batch[i]);
    }
  }
  return alive;
}

Status KvCache::delete_document(const std::string& id) {
  // Never a store key (nor a dir store path) from a string that is not an id.
  if (!is_document_id(id)) return invalid_argument(not_a_document_id("id", id));
  Status first;
  auto rec = get_document(id);
  if (rec.ok() && rec->has_value()) {
    Status st = store_.del(state_store_key((*rec)->state_key));
    if (!st.ok()) first = st;
  }
  for (Status st : {store_.del(id), store_.set_remove(index_set(), id)})
    if (!st.ok() && first.ok()) first = st;
  if (!first.ok()) stats_.error();
  return first;
}

Result<DocumentRecord> KvCache::save_document(std::span<const int32_t> tokens, const KvRowFn& row,
                                              std::span<const uint8_t> blob, std::chrono::seconds ttl,
                                              const std::string& owner) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("save_document: no tokens");
  const int64_t B = opt_.block_tokens;
  const int64_t full = n / B;
  const int64_t cached = longest_cached_prefix(tokens, full);
  YOCO_RETURN_IF_ERROR(write_blocks(tokens, row, cached, full - cached, ttl));
  DocumentRecord rec = make_document(tokens, ttl, owner);
  YOCO_RETURN_IF_ERROR(put_state(rec.state_key, blob, ttl));
  const int64_t elem = opt_.dtype == KvDType::kBF16 ? 2 : 4;
  const int64_t block_object = static_cast<int64_t>(kObjectHeaderBytes) + 2 * B * opt_.kv_dim * elem;
  rec.stored_bytes = full * block_object + static_cast<int64_t>(kObjectHeaderBytes + blob.size());
  rec.stored_bytes += static_cast<int64_t>(kObjectHeaderBytes + document_to_json(rec).size());
  YOCO_RETURN_IF_ERROR(put_document(rec));
  return rec;
}

Result<std::optional<LoadedDocument>> KvCache::load_document(const std::string& id) {
  YOCO_ASSIGN_OR_RETURN(std::optional<DocumentRecord> rec, get_document(id));
  if (!rec) return std::optional<LoadedDocument>();
  LoadedDocument doc;
  doc.record = std::move(*rec);
  KvRows rows;
  const int64_t found = walk(doc.record.block_keys, &rows, nullptr);
  if (found == static_cast<int64_t>(doc.record.block_keys.size())) {
    auto state = get_state(doc.record.state_key);
    if (state.ok() && state->has_value()) {
      CachedPrefix p;
      p.tokens = static_cast<int64_t>(doc.record.tokens.size());
      p.blocks = found;
      p.k = std::move(rows.k);
      p.v = std::move(rows.v);
      p.state = std::move(**state);
      doc.cached = std::move(p);
    }
  }
  return std::optional<LoadedDocument>(std::move(doc));
}

}  // namespace yoco
