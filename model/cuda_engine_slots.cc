// The CUDA engine's sequence slots and K/V block allocator: ids, block tables, reservations, checks.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/cuda_engine_impl.h"

namespace yoco {

using cuda_engine_internal::cuda_check;
using cuda_engine_internal::Slot;

Status CudaEngine::Impl::check_id(SeqId id, const char* field) const {
  if (id < 0 || id >= static_cast<int>(slots.size()) || !slots[id].used)
    return not_found(std::string(field) + ": no sequence " + std::to_string(id));
  return Status::Ok();
}

Status CudaEngine::Impl::check_tokens(std::span<const int32_t> t, int64_t start, const std::string& field) const {
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] < 0 || t[i] >= V)
      return invalid_argument(field + "[" + std::to_string(i) + "]: token id " + std::to_string(t[i]) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (start + static_cast<int64_t>(t.size()) > limit())
    return invalid_argument(field + ": sequence of " + std::to_string(start + static_cast<int64_t>(t.size())) +
                            " tokens exceeds the engine's context " + std::to_string(limit()));
  return Status::Ok();
}

void CudaEngine::Impl::fill_table(const Slot& s, int32_t* dst) const {
  std::fill(dst, dst + table_width(), 0);
  if (!tf) {
    std::copy(s.blocks.begin(), s.blocks.end(), dst);
    return;
  }
  const int per = opt.kv_block_size / kKvChunkRows;
  for (size_t b = 0; b < s.blocks.size(); ++b)
    for (int c = 0; c < per; ++c) dst[b * per + c] = (s.blocks[b] * per + c) * cfg.n_layers;
}

Status CudaEngine::Impl::reserve(std::span<const SeqId> ids, std::span<const int64_t> need) {
  int64_t want = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    want += std::max(0, blocks_for(need[i]) - static_cast<int>(slots[ids[i]].blocks.size()));
  if (want > static_cast<int64_t>(free_blocks.size()))
    return Status(StatusCode::kResourceExhausted, "KV pool: " + std::to_string(want) + " more blocks needed, " +
                                                      std::to_string(free_blocks.size()) + " free");
  for (size_t i = 0; i < ids.size(); ++i) {
    Slot& s = slots[ids[i]];
    while (static_cast<int>(s.blocks.size()) < blocks_for(need[i])) {
      s.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  }
  return Status::Ok();
}

Status CudaEngine::Impl::check_batch(std::span<const SeqId> ids, const char* field) const {
  if (ids.empty()) return invalid_argument(std::string(field) + ": empty batch");
  if (static_cast<int>(ids.size()) > opt.max_batch)
    return invalid_argument(std::string(field) + ": batch of " + std::to_string(ids.size()) + " exceeds max_batch " +
                            std::to_string(opt.max_batch));
  std::vector<char> seen(slots.size(), 0);
  for (size_t b = 0; b < ids.size(); ++b) {
    YOCO_RETURN_IF_ERROR(check_id(ids[b], (std::string(field) + "[" + std::to_string(b) + "]").c_str()));
    if (seen[ids[b]]++)
      return invalid_argument(std::string(field) + ": sequence " + std::to_string(ids[b]) + " appears twice");
  }
  return Status::Ok();
}

int CudaEngine::free_blocks() const { return static_cast<int>(impl_->free_blocks.size()); }

int CudaEngine::free_sequences() const {
  return static_cast<int>(
      std::count_if(impl_->slots.begin(), impl_->slots.end(), [](const Slot& s) { return !s.used; }));
}

int64_t CudaEngine::kv_bytes_used() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.opt.kv_blocks - static_cast<int>(m.free_blocks.size())) * m.opt.kv_block_size *
         kv_bytes_per_token();
}

int64_t CudaEngine::position(SeqId id) const {
  if (!impl_->check_id(id, "id").ok()) return -1;
  return impl_->slots[id].position;
}

int64_t CudaEngine::capacity(SeqId id) const {
  if (!impl_->check_id(id, "id").ok()) return -1;
  return static_cast<int64_t>(impl_->slots[id].blocks.size()) * impl_->opt.kv_block_size;
}

Status CudaEngine::reserve(SeqId id, int64_t rows) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "reserve"));
  if (rows < 0 || rows > m.limit())
    return invalid_argument("rows: " + std::to_string(rows) + " is outside [0, the engine's context " +
                            std::to_string(m.limit()) + "]");
  const SeqId one[1] = {id};
  const int64_t need[1] = {rows};
  return m.reserve(one, need);
}

Result<CudaEngine::SeqId> CudaEngine::new_sequence() {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.slots.size(); ++i) {
    if (m.slots[i].used) continue;
    YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
    // A gRet state must start at zero; zero the rings and last_hidden too (nothing stale).
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(m.slot_state(static_cast<int>(i), 0), 0,
                                                    static_cast<size_t>(m.n_states) * m.layer_floats * 4, m.stream),
                                    "zero state"));
    YOCO_RETURN_IF_ERROR(
        cuda_check(cudaMemsetAsync(m.last_hidden.as<float>() + i * m.D, 0, static_cast<size_t>(m.D) * 4, m.stream),
                   "zero hidden"));
    YOCO_RETURN_IF_ERROR(m.finish("new_sequence"));
    m.slots[i] = Slot{true, 0, {}};
    return static_cast<SeqId>(i);
  }
  return Status(StatusCode::kResourceExhausted,
                "cuda engine: all " + std::to_string(m.slots.size()) + " sequence slots are in use");
}

Status CudaEngine::release(SeqId id) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "release"));
  Slot& s = m.slots[id];
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) m.free_blocks.push_back(*it);
  s = Slot{};
  return Status::Ok();
}

}  // namespace yoco
