// The CUDA engine's sequence slots and K/V block allocator (model/cuda/slots.h), the public calls
// on them, and the argument checks every call shares.
#include "model/cuda/slots.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/cuda/engine_impl.h"

namespace yoco {

using cuda_engine::cuda_check;
using cuda_engine::Impl;
using cuda_engine::Slot;

namespace cuda_engine {

Status SequenceSlots::init(const ModelConfig& c, const CudaEngineOptions& o, const EngineSizes& s,
                           cudaStream_t stream) {
  dim_ = c.dim;
  states_per_sequence_ = s.states_per_sequence;
  state_floats_ = s.state_floats;
  kv_blocks_ = o.kv_blocks;
  block_size_ = o.kv_block_size;
  blocks_per_sequence_ = s.blocks_per_sequence;
  chunks_per_sequence_ = s.chunks_per_sequence;
  n_layers_ = c.n_layers;
  pool_row_floats_ = s.pool_row_floats;
  layer_chunks_ = c.is_transformer();
  YOCO_RETURN_IF_ERROR(states_.alloc(static_cast<size_t>(o.max_sequences) * state_bytes_per_slot(), "states", stream));
  YOCO_RETURN_IF_ERROR(last_hidden_.alloc(static_cast<size_t>(o.max_sequences) * dim_ * 4, "last_hidden", stream));
  const size_t pool_bytes = static_cast<size_t>(kv_blocks_) * block_size_ * s.pool_row_floats * 4;
  YOCO_RETURN_IF_ERROR(k_pool_.alloc(pool_bytes, "K pool", stream));
  YOCO_RETURN_IF_ERROR(v_pool_.alloc(pool_bytes, "V pool", stream));
  slots_.assign(o.max_sequences, Slot{});
  refs_.assign(kv_blocks_, 0);
  free_blocks_.resize(kv_blocks_);
  for (int i = 0; i < kv_blocks_; ++i) free_blocks_[i] = kv_blocks_ - 1 - i;  // block 0 on top
  return Status::Ok();
}

Status SequenceSlots::check_id(int id, const std::string& field) const {
  if (id < 0 || id >= count() || !slots_[id].used) return not_found(field + ": no sequence " + std::to_string(id));
  return Status::Ok();
}

int SequenceSlots::free_slot() const {
  for (int i = 0; i < count(); ++i)
    if (!slots_[i].used) return i;
  return -1;
}

int SequenceSlots::free_slot_count() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.used; }));
}

void SequenceSlots::release(int id) {
  Slot& s = slots_[id];
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it)
    if (--refs_[*it] == 0) free_blocks_.push_back(*it);
  s = Slot{};
}

void SequenceSlots::share(int id, std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    ++refs_[b];
    slots_[id].blocks.push_back(b);
  }
}

void SequenceSlots::fill_table(const Slot& s, int32_t* dst) const {
  std::fill(dst, dst + table_width(), 0);
  if (!layer_chunks_) {
    std::copy(s.blocks.begin(), s.blocks.end(), dst);
    return;
  }
  const int per = block_size_ / kKvChunkRows;
  for (size_t b = 0; b < s.blocks.size(); ++b)
    for (int c = 0; c < per; ++c) dst[b * per + c] = (s.blocks[b] * per + c) * n_layers_;
}

Status SequenceSlots::reserve(std::span<const int> ids, std::span<const int64_t> need) {
  int64_t want = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    want += std::max(0, blocks_for(need[i]) - static_cast<int>(slots_[ids[i]].blocks.size()));
  if (want > static_cast<int64_t>(free_blocks_.size()))
    return Status(StatusCode::kResourceExhausted, "KV pool: " + std::to_string(want) + " more blocks needed, " +
                                                      std::to_string(free_blocks_.size()) + " free");
  for (size_t i = 0; i < ids.size(); ++i) {
    Slot& s = slots_[ids[i]];
    while (static_cast<int>(s.blocks.size()) < blocks_for(need[i])) {
      s.blocks.push_back(free_blocks_.back());
      refs_[free_blocks_.back()] = 1;
      free_blocks_.pop_back();
    }
  }
  return Status::Ok();
}

Status Impl::check_tokens(std::span<const int32_t> t, int64_t start, const std::string& field) const {
  const int vocab = sizes.widths.vocab;
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] < 0 || t[i] >= vocab)
      return invalid_argument(field + "[" + std::to_string(i) + "]: token id " + std::to_string(t[i]) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (start + static_cast<int64_t>(t.size()) > limit())
    return invalid_argument(field + ": sequence of " + std::to_string(start + static_cast<int64_t>(t.size())) +
                            " tokens exceeds the engine's context " + std::to_string(limit()));
  return Status::Ok();
}

Status Impl::check_batch(std::span<const int> ids, const char* field) const {
  if (ids.empty()) return invalid_argument(std::string(field) + ": empty batch");
  if (static_cast<int>(ids.size()) > opt.max_batch)
    return invalid_argument(std::string(field) + ": batch of " + std::to_string(ids.size()) + " exceeds max_batch " +
                            std::to_string(opt.max_batch));
  std::vector<char> seen(slots.count(), 0);
  for (size_t b = 0; b < ids.size(); ++b) {
    YOCO_RETURN_IF_ERROR(slots.check_id(ids[b], std::string(field) + "[" + std::to_string(b) + "]"));
    if (seen[ids[b]]++)
      return invalid_argument(std::string(field) + ": sequence " + std::to_string(ids[b]) + " appears twice");
  }
  return Status::Ok();
}

}  // namespace cuda_engine

int CudaEngine::free_blocks() const { return impl_->slots.free_block_count(); }

int CudaEngine::free_sequences() const { return impl_->slots.free_slot_count(); }

int64_t CudaEngine::kv_bytes_used() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.opt.kv_blocks - m.slots.free_block_count()) * m.opt.kv_block_size *
         kv_bytes_per_token();
}

int64_t CudaEngine::position(SeqId id) const {
  if (!impl_->slots.check_id(id, "id").ok()) return -1;
  return impl_->slots[id].position;
}

int64_t CudaEngine::capacity(SeqId id) const {
  if (!impl_->slots.check_id(id, "id").ok()) return -1;
  return static_cast<int64_t>(impl_->slots[id].blocks.size()) * impl_->opt.kv_block_size;
}

Status CudaEngine::reserve(SeqId id, int64_t rows) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, "reserve"));
  if (rows < 0 || rows > m.limit())
    return invalid_argument("rows: " + std::to_string(rows) + " is outside [0, the engine's context " +
                            std::to_string(m.limit()) + "]");
  const int one[1] = {id};
  const int64_t need[1] = {rows};
  return m.slots.reserve(one, need);
}

Result<CudaEngine::SeqId> CudaEngine::new_sequence() {
  Impl& m = *impl_;
  const int i = m.slots.free_slot();
  if (i < 0)
    return Status(StatusCode::kResourceExhausted,
                  "cuda engine: all " + std::to_string(m.slots.count()) + " sequence slots are in use");
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  // A gRet state must start at zero; zero the rings and last_hidden too (nothing stale).
  YOCO_RETURN_IF_ERROR(
      cuda_check(cudaMemsetAsync(m.slots.state(i, 0), 0, static_cast<size_t>(m.slots.state_bytes_per_slot()), m.stream),
                 "zero state"));
  YOCO_RETURN_IF_ERROR(
      cuda_check(cudaMemsetAsync(m.slots.last_hidden(i), 0, static_cast<size_t>(m.sizes.widths.dim) * 4, m.stream),
                 "zero hidden"));
  YOCO_RETURN_IF_ERROR(m.finish("new_sequence"));
  m.slots[i] = Slot{true, 0, {}};
  return static_cast<SeqId>(i);
}

// Engine::fork on the device: the slot's states and last_hidden copied device to device, whole
// blocks below the position shared (refs), the partial last block copied into a block of its own.
Result<CudaEngine::SeqId> CudaEngine::fork(SeqId id) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, "fork"));
  const int f = m.slots.free_slot();
  if (f < 0)
    return Status(StatusCode::kResourceExhausted,
                  "cuda engine: all " + std::to_string(m.slots.count()) + " sequence slots are in use");
  const Slot src = m.slots[id];
  const int bs = m.slots.block_size();
  const size_t whole = static_cast<size_t>(src.position / bs);
  const bool partial = src.position % bs != 0;
  if (partial && m.slots.free_block_count() < 1)
    return Status(StatusCode::kResourceExhausted, "KV pool: 1 more block needed, 0 free");
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(cuda_check(
      cudaMemcpyAsync(m.slots.state(f, 0), m.slots.state(id, 0), static_cast<size_t>(m.slots.state_bytes_per_slot()),
                      cudaMemcpyDeviceToDevice, m.stream),
      "fork state"));
  YOCO_RETURN_IF_ERROR(
      cuda_check(cudaMemcpyAsync(m.slots.last_hidden(f), m.slots.last_hidden(id),
                                 static_cast<size_t>(m.sizes.widths.dim) * 4, cudaMemcpyDeviceToDevice, m.stream),
                 "fork hidden"));
  m.slots[f] = Slot{true, src.position, {}};
  m.slots.share(f, std::span<const int32_t>(src.blocks.data(), whole));
  if (partial) {
    const int one[1] = {f};
    const int64_t need[1] = {static_cast<int64_t>(whole + 1) * bs};
    if (Status r = m.slots.reserve(one, need); !r.ok()) {
      m.slots.release(f);
      return r;
    }
    const size_t bytes = static_cast<size_t>(m.slots.block_floats()) * 4;
    const size_t from = static_cast<size_t>(src.blocks[whole]) * m.slots.block_floats();
    const size_t to = static_cast<size_t>(m.slots[f].blocks.back()) * m.slots.block_floats();
    for (float* pool : {m.slots.k_pool(), m.slots.v_pool()})
      if (Status c = cuda_check(cudaMemcpyAsync(pool + to, pool + from, bytes, cudaMemcpyDeviceToDevice, m.stream),
                                "fork block");
          !c.ok()) {
        m.slots.release(f);
        return c;
      }
  }
  if (Status d = m.finish("fork"); !d.ok()) {
    m.slots.release(f);
    return d;
  }
  return static_cast<SeqId>(f);
}

Status CudaEngine::release(SeqId id) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, "release"));
  m.slots.release(id);
  return Status::Ok();
}

}  // namespace yoco
