#include "model/cpu_engine.h"

#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"

namespace yoco {

namespace {

Status unknown(Engine::SeqId id) { return Status(StatusCode::kNotFound, "engine: no sequence " + std::to_string(id)); }

}  // namespace

CpuEngine::CpuEngine(const Model& model, KvPool* pool, int threads)
    : model_(model), pool_(pool), threads_(threads > 0 ? threads : cpu::default_threads()) {}

CpuEngine::~CpuEngine() {
  for (auto& s : slots_)
    if (s && s->pages && pool_) pool_->release(*s->pages);
}

Result<Engine::SeqId> CpuEngine::adopt(SequenceState& st) {
  if (st.pages && (!pool_ || !pool_->owns(*st.pages)))
    return invalid_argument("state: its K/V rows are paged in a pool this engine does not own");
  SeqId id = 0;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<SeqId>(slots_.size());
    slots_.emplace_back();
  }
  auto s = std::make_unique<SequenceState>(std::move(st));
  st = SequenceState{};
  // A fresh state in a pooled engine keeps its rows in pool blocks, as a shipped one does.
  if (pool_ && !s->pages && s->position == 0) s->pages = pool_->new_pages();
  slots_[id] = std::move(s);
  return id;
}

Status CpuEngine::release(SeqId id) {
  SequenceState* s = find(id);
  if (!s) return unknown(id);
  if (s->pages && pool_) pool_->release(*s->pages);
  slots_[id].reset();
  free_.push_back(id);
  return Status::Ok();
}

int64_t CpuEngine::position(SeqId id) const {
  const SequenceState* s = find(id);
  return s ? s->position : -1;
}

int64_t CpuEngine::capacity(SeqId id) const {
  const SequenceState* s = find(id);
  if (!s) return -1;
  return s->pages ? s->pages->capacity() : std::numeric_limits<int64_t>::max();
}

Status CpuEngine::reserve(SeqId id, int64_t rows) {
  SequenceState* s = find(id);
  if (!s) return unknown(id);
  if (!s->pages) return Status::Ok();  // contiguous rows grow as they are written
  return pool_->reserve(*s->pages, rows);
}

Status CpuEngine::prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  SequenceState* s = find(id);
  if (!s) return unknown(id);
  bind_threads();
  return model_.prefill(*s, tokens, opt);
}

Status CpuEngine::forward(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt, float* out) {
  SequenceState* s = find(id);
  if (!s) return unknown(id);
  bind_threads();
  return model_.forward(*s, tokens, out, opt);
}

Status CpuEngine::logits(std::span<const SeqId> ids, float* out) {
  std::vector<SequenceState*> states;
  YOCO_RETURN_IF_ERROR(gather(ids, states));
  bind_threads();
  return model_.logits(states, out);
}

Status CpuEngine::decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) {
  std::vector<SequenceState*> states;
  YOCO_RETURN_IF_ERROR(gather(ids, states));
  bind_threads();
  return model_.decode_step(states, tokens, out);
}

Status CpuEngine::read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const {
  const SequenceState* s = find(id);
  if (!s) return unknown(id);
  if (first < 0 || n < 0 || first + n > s->position)
    return invalid_argument("rows: [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") is outside the sequence's " + std::to_string(s->position) + " rows");
  const int KV = model_.shard().kv_dim;
  for (int64_t r = 0; r < n; ++r) s->read_kv(first + r, KV, 0, KV, k + r * KV, v + r * KV);
  return Status::Ok();
}

Status CpuEngine::snapshot(SeqId id, SequenceState& out) const {
  const SequenceState* s = find(id);
  if (!s) return unknown(id);
  SequenceState c;
  c.position = s->position;
  c.self = s->self;
  c.last_hidden = s->last_hidden;
  out = std::move(c);
  return Status::Ok();
}

Result<Engine::SeqId> CpuEngine::fork(SeqId id) {
  const SequenceState* s = find(id);
  if (!s) return unknown(id);
  SequenceState c;
  c.position = s->position;
  c.self = s->self;
  c.last_hidden = s->last_hidden;
  if (!s->pages) {
    c.k = s->k;
    c.v = s->v;
    return adopt(c);
  }
  // Whole blocks below the position are never written again: shared. The block the next row
  // lands in (partly written, or reserved ahead) is the fork's own; blocks reserved beyond it
  // are not carried (the fork reserves its own). A transformer's chunks never straddle blocks.
  const KvPages& p = *s->pages;
  const int64_t whole = s->position / p.block_size;
  const bool partial = s->position % p.block_size != 0;
  KvPages pages = pool_->new_pages(std::vector<int32_t>(p.blocks.begin(), p.blocks.begin() + whole));
  pool_->hold_blocks(pages.blocks);
  if (partial) {
    Status r = pool_->reserve(pages, (whole + 1) * p.block_size);
    if (!r.ok()) {
      pool_->release(pages);
      return r;
    }
    const size_t n = static_cast<size_t>(p.block_size) * p.kv_dim;
    const size_t src = static_cast<size_t>(p.blocks[whole]) * n, dst = static_cast<size_t>(pages.blocks.back()) * n;
    if (p.bf16()) {
      std::memcpy(p.k16_pool + dst, p.k16_pool + src, n * 2);
      std::memcpy(p.v16_pool + dst, p.v16_pool + src, n * 2);
    } else {
      std::memcpy(p.k_pool + dst, p.k_pool + src, n * 4);
      std::memcpy(p.v_pool + dst, p.v_pool + src, n * 4);
    }
  }
  c.pages = std::move(pages);
  return adopt(c);
}

SequenceState* CpuEngine::find(SeqId id) const {
  return id >= 0 && id < static_cast<SeqId>(slots_.size()) ? slots_[id].get() : nullptr;
}

Status CpuEngine::gather(std::span<const SeqId> ids, std::vector<SequenceState*>& states) const {
  states.reserve(ids.size());
  for (SeqId id : ids) {
    SequenceState* s = find(id);
    if (!s) return unknown(id);
    states.push_back(s);
  }
  return Status::Ok();
}

void CpuEngine::bind_threads() {
  if (threads_ <= 0 || bound_thread_ == std::this_thread::get_id()) return;
  cpu::set_num_threads(threads_);
  bound_thread_ = std::this_thread::get_id();
}

}  // namespace yoco
