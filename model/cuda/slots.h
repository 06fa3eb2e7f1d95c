// The CUDA engine's sequences (model/cuda/cuda_engine.h): slots, the device memory they index (each
// slot's self-decoder states and last_hidden, the paged global K/V pool) and the pool's block
// allocator with its block tables. Private to yoco_engine_cuda: includes CUDA headers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/cuda/device.h"
#include "model/cuda/sizes.h"
#include "model/engine.h"

namespace yoco::cuda_engine {

struct Slot {
  bool used = false;
  int64_t position = 0;  // tokens consumed
  std::vector<int32_t> blocks;
};

class SequenceSlots {
 public:
  // Allocates the states, last_hidden rows and the K and V pools, zeroed on `stream`.
  Status init(const ModelConfig& c, const CudaEngineOptions& o, const EngineSizes& s, cudaStream_t stream);

  int count() const { return static_cast<int>(slots_.size()); }
  Slot& operator[](int id) { return slots_[id]; }
  const Slot& operator[](int id) const { return slots_[id]; }
  // NOT_FOUND naming `field` for an id that is not a used slot.
  Status check_id(int id, const std::string& field) const;
  // The first free slot, or −1.
  int free_slot() const;
  int free_slot_count() const;
  int free_block_count() const { return static_cast<int>(free_blocks_.size()); }
  // Drops the slot's hold on its blocks (a block no other slot holds goes back on the stack, the
  // last taken first) and frees it.
  void release(int id);
  // Appends `blocks` (held by another slot) to slot `id`'s table, one more hold each (fork).
  void share(int id, std::span<const int32_t> blocks);

  // One (loop, layer) state of a slot: gRet S [heads, hd, hd], or the SWA K ring [window, dim]
  // followed by the V ring.
  float* state(int slot, int state_index) const {
    return states_.as<float>() + (static_cast<int64_t>(slot) * states_per_sequence_ + state_index) * state_floats_;
  }
  int64_t state_bytes_per_slot() const { return static_cast<int64_t>(states_per_sequence_) * state_floats_ * 4; }
  float* last_hidden(int slot) const { return last_hidden_.as<float>() + static_cast<int64_t>(slot) * dim_; }
  float* last_hidden_rows() const { return last_hidden_.as<float>(); }
  float* k_pool() const { return k_pool_.as<float>(); }
  float* v_pool() const { return v_pool_.as<float>(); }

  // Grows each slot to hold need[i] rows, all or nothing (RESOURCE_EXHAUSTED).
  Status reserve(std::span<const int> ids, std::span<const int64_t> need);
  int blocks_for(int64_t rows) const { return static_cast<int>((rows + block_size_ - 1) / block_size_); }
  int block_size() const { return block_size_; }
  int64_t block_floats() const { return static_cast<int64_t>(block_size_) * pool_row_floats_; }

  // The table rows the attention and append kernels read: the pool blocks (YOCO), or a
  // transformer's chunk ids. A transformer's pool row holds one token's K (V) of all n_layers
  // layers (n_layers · kv_dim floats), layer-major inside each kKvChunkRows-row chunk as
  // model/state.h lays it out. The kernels see layer l as a pool of kKvChunkRows-row "blocks"
  // (chunks) of kv_dim-wide rows starting at k_pool + l · kKvChunkRows · kv_dim, whose block ids
  // are (pool chunk index) · n_layers: chunk c of block b is pool chunk b · (block_size /
  // kKvChunkRows) + c, and its layer-l rows sit at ((chunk · n_layers + l) · kKvChunkRows + row) ·
  // kv_dim, exactly that view. So one chunk table serves every layer, and upload/download copy
  // pool rows as the CPU state holds them.
  int table_width() const { return layer_chunks_ ? chunks_per_sequence_ : blocks_per_sequence_; }
  int table_block() const { return layer_chunks_ ? kKvChunkRows : block_size_; }
  int table_ids() const { return layer_chunks_ ? kv_blocks_ * (block_size_ / kKvChunkRows) * n_layers_ : kv_blocks_; }
  // Writes table_width() entries of slot `s`'s table.
  void fill_table(const Slot& s, int32_t* dst) const;
  // Pool rows that hold the first n tokens' K/V: a transformer's chunk is layer-major, so its
  // last chunk is needed whole (model/state.h).
  int64_t stored_rows(int64_t n) const {
    return layer_chunks_ ? (n + kKvChunkRows - 1) / kKvChunkRows * kKvChunkRows : n;
  }

 private:
  std::vector<Slot> slots_;
  std::vector<int32_t> free_blocks_;  // a stack
  std::vector<int32_t> refs_;         // slots holding each block (forks share whole blocks)
  DeviceMem states_;                  // [max_sequences, states_per_sequence · state_floats]
  DeviceMem last_hidden_;             // [max_sequences, dim]
  DeviceMem k_pool_, v_pool_;         // [kv_blocks, block_size, pool_row_floats]
  int dim_ = 0, states_per_sequence_ = 0, pool_row_floats_ = 0;
  int64_t state_floats_ = 0;
  int kv_blocks_ = 0, block_size_ = 0, blocks_per_sequence_ = 0, chunks_per_sequence_ = 0, n_layers_ = 0;
  bool layer_chunks_ = false;  // a transformer: per-layer chunk tables (see table_width)
};

}  // namespace yoco::cuda_engine
