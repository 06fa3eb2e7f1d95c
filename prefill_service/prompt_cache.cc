#include "prefill_service/prompt_cache.h"

#include <algorithm>
#include <string>
#include <utility>
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

// ---- PromptCache -----------------------------------------------------------------------------

PromptCache::PromptCache(KvCache& cache, const Model& model, bool write_prompts)
    : cache_(cache), model_(model), write_prompts_(write_prompts) {}

std::optional<SequenceState> PromptCache::resume(const PromptCacheRequest& r, PromptCacheProgress& p) {
  if (r.document) return std::nullopt;  // computed from scratch, like the prompts it will serve
  const ModelConfig& cfg = model_.config();
  const int B = static_cast<int>(block_tokens());
  const int64_t size = static_cast<int64_t>(r.tokens.size());
  // Blocks resident on the decode worker are neither loaded nor shipped (their rows stay zero
  // here): only the state and the rows past them are needed.
  const int64_t resident_blocks = r.resident_rows / B;
  // Document ends first (exact resumes at any position), longest first; then whole blocks.
  std::vector<int64_t> ends(r.document_ends.begin(), r.document_ends.end());
  std::sort(ends.rbegin(), ends.rend());
  for (int64_t at : ends) {
    if (at <= 0 || at > size) continue;
    auto state = cache_.get_state(state_key_for(r.tokens.first(at), B, model_.fingerprint()));
    if (!state.ok() || !state->has_value()) continue;
    const int64_t blocks = at / B, skip = std::min(blocks, resident_blocks);
    const auto keys = chain_keys(r.tokens.first(blocks * B), B, model_.fingerprint());
    auto rows = cache_.read_blocks(std::span<const BlockKey>(keys).subspan(skip));
    if (!rows.ok()) continue;
    const size_t skipped = static_cast<size_t>(skip * B) * cfg.kv_dim();
    CachedPrefix cp;
    cp.tokens = at;
    cp.blocks = blocks;
    // Room for the whole prompt's rows now: the slices to come then never reallocate them.
    cp.k.reserve(static_cast<size_t>(size) * cfg.kv_dim());
    cp.v.reserve(cp.k.capacity());
    cp.k.assign(skipped, 0.0f);
    cp.v.assign(skipped, 0.0f);
    cp.k.insert(cp.k.end(), rows->k.begin(), rows->k.end());
    cp.v.insert(cp.v.end(), rows->v.begin(), rows->v.end());
    cp.state = std::move(**state);
    SequenceState st;
    if (!restore_prefix(cache_, std::move(cp), cfg, st).ok()) continue;
    p.cached_tokens = at;
    p.hole = skip * B;
    return st;
  }
  if (!write_prompts_) return std::nullopt;  // prompt caching off: documents only
  CachedPrefix cp = cache_.load_prefix(r.tokens, -1, resident_blocks);
  if (cp.tokens <= 0) return std::nullopt;
  const int64_t blocks = cp.blocks, tokens_cached = cp.tokens;
  SequenceState st;
  if (!restore_prefix(cache_, std::move(cp), cfg, st).ok()) return std::nullopt;
  p.cached_tokens = tokens_cached;
  p.hole = std::min(resident_blocks, blocks) * B;
  return st;
}

int64_t PromptCache::next_stop(const PromptCacheRequest& r, int64_t computed) const {
  const int64_t B = block_tokens(), size = static_cast<int64_t>(r.tokens.size());
  int64_t stop = size;
  // The last whole block: a prompt's with prefix caching, and a document's, so that a plain
  // prompt extending the document resumes there (docs/design.md, one prefix identity).
  const int64_t boundary = size / B * B;
  if ((writes_prompt(r) || r.document) && boundary > computed) stop = boundary;
  if (!r.document)
    for (int64_t at : r.document_ends)
      if (at > computed && at < stop) stop = at;
  return stop;
}

void PromptCache::at_stop(const PromptCacheRequest& r, PromptCacheProgress& p, int64_t at, const Snapshot& snapshot,
                          SequenceState& rows) {
  const int64_t B = block_tokens(), size = static_cast<int64_t>(r.tokens.size());
  if (at <= p.cached_tokens) return;
  const bool document_end =
      !r.document && std::find(r.document_ends.begin(), r.document_ends.end(), at) != r.document_ends.end();
  // A document's own end is stored by store_document.
  const bool boundary = at == size / B * B && (writes_prompt(r) || (r.document && at < size));
  if (!document_end && !boundary) return;
  // Rows of the partial block below `at` ride in the state, as in a document's (whole blocks go
  // as block objects, written by write_back).
  const int64_t full = at / B * B;
  if (full < p.hole) return;
  SequenceState snap;
  if (!snapshot(snap).ok()) return;
  StateBlobOptions so;
  so.include_kv = full < at;
  so.kv_row_begin = full;
  so.kv_row_end = at;
  so.kv_dtype = cache_.options().dtype;
  snap.k.swap(rows.k);  // the host rows hold [0, at): lent, not copied
  snap.v.swap(rows.v);
  const auto blob = serialize_state(snap, model_.config(), model_.fingerprint(), so);
  snap.k.swap(rows.k);
  snap.v.swap(rows.v);
  const auto key = state_key_for(r.tokens.first(at), static_cast<int>(B), model_.fingerprint());
  // A document's boundary state lives as long as the document; prompt states until evicted.
  const std::chrono::seconds ttl = r.document ? r.document_ttl : std::chrono::seconds(0);
  if (cache_.put_state(key, blob, ttl).ok() && document_end) p.stored_prefix = std::max(p.stored_prefix, at);
}

void PromptCache::write_back(const PromptCacheRequest& r, const PromptCacheProgress& p, const SequenceState& rows) {
  if (!writes_prompt(r) && p.stored_prefix == 0) return;
  const int64_t B = block_tokens();
  const int64_t first = p.cached_tokens / B;  // blocks below this were loaded, not computed
  // Without prefix caching, only the blocks under the document ends whose states were stored.
  const int64_t last = writes_prompt(r) ? static_cast<int64_t>(r.tokens.size()) / B : p.stored_prefix / B;
  if (last > first)
    (void)cache_.write_blocks(r.tokens, rows.k.data(), rows.v.data(), first, last - first, std::chrono::seconds(0));
}

Result<DocumentRecord> PromptCache::store_document(const PromptCacheRequest& r, const SequenceState& snap) {
  auto rec = save_document(cache_, r.tokens, snap, model_.config(), r.document_ttl, std::string(r.document_owner));
  if (!rec.ok()) return Status(StatusCode::kUnavailable, "KV store: " + rec.status().message());
  return rec;
}

}  // namespace yoco
