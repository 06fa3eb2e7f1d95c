// The CUDA engine's sizes, each named for what it counts (tensor-parallel world 1). Plain C++.
#pragma once

#include <algorithm>
#include <cstdint>

#include "model/config.h"
#include "model/engine.h"
#include "model/program.h"
#include "model/state.h"

namespace yoco::cuda_engine {

struct EngineSizes {
  program::Widths widths;       // dim, hidden, vocab, heads, head dims, kv_dim: the program's widths
  int self_qkv_width = 0;       // the self-decoder's q|k|v(|g) columns: 3 or 4 · dim (gRet's gate rows follow)
  int mixer_in_width = 0;       // the columns of the self or transformer layer's fused product on the device:
                                // self_qkv_width (+ n_self_heads gate logits with gRet), or q|k|v (dim + 2·kv_dim)
  int pool_row_floats = 0;      // one token's K (or V) in the pool: kv_dim (YOCO) or n_layers · kv_dim (transformer)
  int states_per_sequence = 0;  // (loop, layer) self-decoder states: n_loops · n_self_layers
  int64_t state_floats = 0;     // one of them: n_self_heads · hd² (gRet S) or 2 · window · dim (SWA rings)
  int max_rows = 0;             // rows of one call: max(max_batch, max_chunk_tokens)
  int logits_rows = 0;          // rows of the logits buffer: max_batch, or a forward's chunk (≤ 64 MiB of them)
  int blocks_per_sequence = 0;  // block-table entries: max_context / kv_block_size, rounded up
  int chunks_per_sequence = 0;  // transformer: chunk-table entries, blocks_per_sequence · block_size / kKvChunkRows

  static EngineSizes of(const ModelConfig& c, const CudaEngineOptions& o) {
    EngineSizes s;
    s.widths = program::widths(c, shard_dims(c, 1));
    s.self_qkv_width = c.is_transformer() ? 0 : c.self_qkv_rows();
    s.mixer_in_width =
        c.is_transformer() ? c.dim + 2 * c.kv_dim() : s.self_qkv_width + (c.is_swa() ? 0 : c.n_self_heads);
    s.pool_row_floats = c.kv_row_floats();
    s.states_per_sequence = c.n_loops * c.n_self_layers;
    s.state_floats = c.is_swa() ? 2 * static_cast<int64_t>(c.sliding_window) * c.dim
                                : static_cast<int64_t>(c.n_self_heads) * c.self_head_dim() * c.self_head_dim();
    s.max_rows = std::max(o.max_batch, o.max_chunk_tokens);
    // A forward (Score) writes every row's logits: its chunks stop at logits_rows rows, so the
    // buffer stays within 64 MiB whatever the vocabulary (at least a decode batch of rows).
    const int logit_cap = c.vocab_size > 0 ? static_cast<int>((int64_t{1} << 24) / c.vocab_size) : 1;
    s.logits_rows = std::max(o.max_batch, std::min(o.max_chunk_tokens, std::max(1, logit_cap)));
    s.blocks_per_sequence =
        o.kv_block_size > 0 ? static_cast<int>((o.max_context + o.kv_block_size - 1) / o.kv_block_size) : 0;
    s.chunks_per_sequence = s.blocks_per_sequence * (o.kv_block_size / kKvChunkRows);
    return s;
  }
};

}  // namespace yoco::cuda_engine
