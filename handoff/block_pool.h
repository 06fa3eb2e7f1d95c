// What the KV transfer receiver needs of a decode worker's paged K/V pool (docs/architecture.md,
// hand-off): fixed-size blocks of rows in two host arrays, K and V, handed out and taken back
// by block id. model/kv_pool.h's KvPool implements it; the receiver never sees the engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "handoff/kv_rows.h"

namespace yoco {

class KvBlockPool {
 public:
  virtual ~KvBlockPool() = default;

  virtual int block_size() const = 0;  // rows per block
  virtual int row_floats() const = 0;  // values per K (and V) row: the model's kv_dim
  virtual int total_blocks() const = 0;
  // The arrays, [total_blocks · block_size, row_floats] each; they never move. An fp32 pool's
  // as floats (a 16-bit pool's are null here); any pool's as bytes.
  virtual float* k_base() = 0;
  virtual float* v_base() = 0;
  // How the values are kept: fp32, or bf16 (16-bit K/V: the sender converts, docs/design.md).
  virtual KvDType kv_dtype() const { return KvDType::kF32; }
  virtual uint8_t* k_bytes() { return reinterpret_cast<uint8_t*>(k_base()); }
  virtual uint8_t* v_bytes() { return reinterpret_cast<uint8_t*>(v_base()); }
  int64_t row_bytes() const { return static_cast<int64_t>(row_floats()) * kv_dtype_bytes(kv_dtype()); }
  // Blocks for `rows` rows, all or nothing: RESOURCE_EXHAUSTED leaves the pool as it was.
  virtual Result<std::vector<int32_t>> allocate_blocks(int64_t rows) = 0;
  // Drops one hold on each block; a block is free again when nobody holds it.
  virtual void release_blocks(std::span<const int32_t> blocks) = 0;

  int64_t bytes() const { return 2 * static_cast<int64_t>(total_blocks()) * block_size() * row_bytes(); }
  // Row `row` of a sequence whose rows fill `blocks` in order: its offset in values from either
  // base (in bytes: times kv_dtype_bytes).
  int64_t row_offset(std::span<const int32_t> blocks, int64_t row) const {
    const int bs = block_size();
    return (static_cast<int64_t>(blocks[row / bs]) * bs + row % bs) * row_floats();
  }
};

}  // namespace yoco
