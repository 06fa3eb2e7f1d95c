#include "prefill_service/prompt_cache.h"

#include <algorithm>
#include <string>
#include <vector>

namespace yoco {

namespace {

KvRowFn state_rows(const SequenceState& st, int kv_dim) {
  return [&st, kv_dim](int64_t r) {
    return std::pair<const float*, const float*>{st.k_row(r, kv_dim), st.v_row(r, kv_dim)};
  };
}

}  // namespace

Status write_state_blocks(KvCache& cache, std::span<const int32_t> tokens, const SequenceState& st, int64_t first_block,
                          int64_t n_blocks, std::chrono::seconds ttl) {
  if ((first_block + n_blocks) * cache.options().block_tokens > st.position)
    return invalid_argument("write_blocks: blocks beyond the state's position " + std::to_string(st.position));
  return cache.write_blocks(tokens, state_rows(st, cache.options().kv_dim), first_block, n_blocks, ttl);
}

Status restore_prefix(const KvCache& cache, const CachedPrefix& p, const ModelConfig& c, SequenceState& out) {
  CachedPrefix copy = p;
  return restore_prefix(cache, std::move(copy), c, out);
}

Status restore_prefix(const KvCache& cache, CachedPrefix&& p, const ModelConfig& c, SequenceState& out) {
  const KvCacheOptions& opt = cache.options();
  if (c.kv_dim() != opt.kv_dim)
    return invalid_argument("restore: model kv_dim " + std::to_string(c.kv_dim()) + " != cache kv_dim " +
                            std::to_string(opt.kv_dim));
  if (p.tokens <= 0) return invalid_argument("restore: nothing cached");
  SequenceState st;
  YOCO_ASSIGN_OR_RETURN(StateBlobInfo info, deserialize_state(p.state, c, opt.fingerprint, st));
  const int64_t block_rows = p.blocks * opt.block_tokens;
  const size_t block_floats = static_cast<size_t>(block_rows) * opt.kv_dim;
  if (info.position != p.tokens)
    return data_loss("restore: state position " + std::to_string(info.position) + " != cached tokens " +
                     std::to_string(p.tokens));
  if (p.k.size() != block_floats || p.v.size() != block_floats)
    return data_loss("restore: block rows do not match blocks");
  const bool tail_ok = info.kv_rows > 0
                           ? info.kv_row_begin == block_rows && info.kv_row_begin + info.kv_rows == info.position
                           : info.position == block_rows;
  if (!tail_ok) return data_loss("restore: state KV rows do not continue the cached blocks");
  // The blob's tail rows (if any) sit past the blocks' rows: keep those, grow to the position.
  std::vector<float> tail_k(st.k.begin() + std::min(st.k.size(), block_floats), st.k.end());
  std::vector<float> tail_v(st.v.begin() + std::min(st.v.size(), block_floats), st.v.end());
  st.k = std::move(p.k);
  st.v = std::move(p.v);
  st.k.resize(static_cast<size_t>(info.position) * opt.kv_dim);
  st.v.resize(st.k.size());
  std::copy(tail_k.begin(), tail_k.end(), st.k.begin() + static_cast<std::ptrdiff_t>(block_floats));
  std::copy(tail_v.begin(), tail_v.end(), st.v.begin() + static_cast<std::ptrdiff_t>(block_floats));
  out = std::move(st);
  return Status::Ok();
}

Result<DocumentRecord> save_document(KvCache& cache, std::span<const int32_t> tokens, const SequenceState& st,
                                     const ModelConfig& c, std::chrono::seconds ttl, const std::string& owner) {
  const KvCacheOptions& opt = cache.options();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("save_document: no tokens");
  if (st.position != n)
    return invalid_argument("save_document: state position " + std::to_string(st.position) +
                            " != " + std::to_string(n) + " tokens");
  if (c.kv_dim() != opt.kv_dim) return invalid_argument("save_document: model kv_dim does not match the cache");
  // The state carries the rows of the trailing partial block; whole blocks go as block objects.
  const int64_t full_rows = n / opt.block_tokens * opt.block_tokens;
  StateBlobOptions so;
  so.include_kv = n > full_rows;
  so.kv_row_begin = full_rows;
  so.kv_row_end = n;
  so.kv_dtype = opt.dtype;
  const std::vector<uint8_t> blob = serialize_state(st, c, opt.fingerprint, so);
  return cache.save_document(tokens, state_rows(st, opt.kv_dim), blob, ttl, owner);
}

}  // namespace yoco
