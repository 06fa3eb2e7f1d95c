// A sequence's whole inference state (docs/design.md §2.5), and its mapping onto the binary hand-off format
// (handoff/state_blob.h) the cluster ships over UCX and the KV store keeps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "handoff/state_blob.h"
#include "model/config.h"

namespace yoco {

// One (loop, layer) of the self-decoder.
struct SelfLayerState {
  // Gated retention: S per head, [n_self_heads, hd, hd] (row = key dim, column = value dim).
  std::vector<float> s;
  // Sliding window: a ring of the newest post-RoPE k and v rows, [capacity, dim] each. The
  // capacity is W (one more than the W−1 rows the format stores) so a decode step can insert
  // its own row before attending; `head` is the oldest row, `count` how many are valid.
  // The row of position p always sits in slot p mod capacity: the layout is a function of the
  // position alone, never of the history that produced the state.
  std::vector<float> k, v;
  int capacity = 0, count = 0, head = 0;

  // Row i of the ring in age order (0 = oldest).
  int ring_index(int i) const { return (head + i) % capacity; }
  void ring_push(const float* k_row, const float* v_row, int dim);
  // Advances the ring as if `rows` rows had been pushed, copying nothing: for rows that pushes
  // right after overwrite anyway.
  void ring_skip(int rows);
};

// Global K/V rows held in a shared paged pool (decode workers) instead of in the state: row r
// lives in block blocks[r / block_size] at row r % block_size. The pool outlives the state.
// A pool keeps its values as fp32 or as bf16 (KvPool::create's dtype, docs/design.md, 16-bit
// K/V): exactly one pair of the pointers below is set, and `pool` names the pool either way.
struct KvPages {
  float* k_pool = nullptr;  // [pool blocks, block_size, kv_dim] fp32, or null
  float* v_pool = nullptr;
  int block_size = 0;
  int kv_dim = 0;
  std::vector<int32_t> blocks;   // the block table
  uint16_t* k16_pool = nullptr;  // the same layout in bf16, or null
  uint16_t* v16_pool = nullptr;
  const void* pool = nullptr;  // the owning pool (KvPool::owns)

  bool bf16() const { return k16_pool != nullptr; }

  int64_t capacity() const { return static_cast<int64_t>(blocks.size()) * block_size; }
  int64_t offset(int64_t r) const {
    return (static_cast<int64_t>(blocks[r / block_size]) * block_size + r % block_size) * kv_dim;
  }
};

// Decode attention visits keys in chunks of this many rows whatever the storage, so a sequence
// in a paged pool decodes bitwise like a contiguous one. Pool block sizes are multiples of it.
constexpr int kKvChunkRows = 32;

// Transformer baseline (arch "transformer", docs/design.md §2.6): the same structure carries its
// per-layer KV cache.
//   - One token's K (and V) "row" holds every layer's row: width W = n_layers · kv_dim
//     (ModelConfig::kv_row_floats()), so the pool, its blocks and k_row(r, W) work unchanged
//     (KvPool and KvPages are created with kv_dim = W).
//   - Inside the rows, each run of kKvChunkRows tokens starting at a multiple of kKvChunkRows
//     (a "chunk", never split across pool blocks) is stored layer-major:
//     [n_layers][kKvChunkRows][kv_dim]. Layer l's K row of token r is at
//       k_row(r − r % kKvChunkRows, W) + (l · kKvChunkRows + r % kKvChunkRows) · kv_dim
//     (layer_k_row below), so each layer's keys are [kKvChunkRows, kv_dim] blocks that decode
//     attention reads in place. Rows are post-RoPE K and V of that layer, heads head-major.
//   - Contiguous storage is sized in whole chunks: k.size() = ceil(position / kKvChunkRows) ·
//     kKvChunkRows · W (the tail of the last chunk is unused).
//   - `self` is empty; last_hidden is the residual stream after the last layer at position − 1
//     (the input of the final norm and output head), so logits() is just the head.
//   - serialize_state / deserialize_state (UCX shipping, KV store) do not take transformer
//     states: deserialize_state answers UNIMPLEMENTED naming the arch.
struct SequenceState {
  int64_t position = 0;  // tokens consumed
  // Global K/V rows [position, kv_row_floats]: YOCO's one K/V per token (K post-RoPE unless
  // cross_decoder_rope is false); a transformer's layout is above. Empty when paged.
  std::vector<float> k, v;
  std::optional<KvPages> pages;      // set: the rows live in a paged pool, k and v stay empty
  std::vector<SelfLayerState> self;  // n_loops · n_self_layers, loop-major
  // The self-decoder output at position − 1: the cross-decoder input for the next-token
  // logits (prefill exits early, so the decode side runs the cross-decoder on it).
  std::vector<float> last_hidden;

  // fp32 rows (contiguous, or paged in an fp32 pool); kv16() states use k_row16 / v_row16.
  const float* k_row(int64_t r, int kv_dim) const {
    return pages ? pages->k_pool + pages->offset(r) : k.data() + r * kv_dim;
  }
  const float* v_row(int64_t r, int kv_dim) const {
    return pages ? pages->v_pool + pages->offset(r) : v.data() + r * kv_dim;
  }
  float* k_row(int64_t r, int kv_dim) { return const_cast<float*>(std::as_const(*this).k_row(r, kv_dim)); }
  float* v_row(int64_t r, int kv_dim) { return const_cast<float*>(std::as_const(*this).v_row(r, kv_dim)); }
  // Transformer: layer `layer`'s K (V) row of token r (layout above); kv_dim is one layer's.
  const float* layer_k_row(int64_t r, int layer, int n_layers, int kv_dim) const {
    return k_row(r - r % kKvChunkRows, n_layers * kv_dim) + layer_row_offset(r, layer, kv_dim);
  }
  const float* layer_v_row(int64_t r, int layer, int n_layers, int kv_dim) const {
    return v_row(r - r % kKvChunkRows, n_layers * kv_dim) + layer_row_offset(r, layer, kv_dim);
  }
  float* layer_k_row(int64_t r, int layer, int n_layers, int kv_dim) {
    return const_cast<float*>(std::as_const(*this).layer_k_row(r, layer, n_layers, kv_dim));
  }
  float* layer_v_row(int64_t r, int layer, int n_layers, int kv_dim) {
    return const_cast<float*>(std::as_const(*this).layer_v_row(r, layer, n_layers, kv_dim));
  }
  static int64_t layer_row_offset(int64_t r, int layer, int kv_dim) {
    return (static_cast<int64_t>(layer) * kKvChunkRows + r % kKvChunkRows) * kv_dim;
  }
  // 16-bit K/V: the rows live in a bf16 pool (only paged states are 16-bit).
  bool kv16() const { return pages && pages->bf16(); }
  const uint16_t* k_row16(int64_t r) const { return pages->k16_pool + pages->offset(r); }
  const uint16_t* v_row16(int64_t r) const { return pages->v16_pool + pages->offset(r); }
  uint16_t* k_row16(int64_t r) { return pages->k16_pool + pages->offset(r); }
  uint16_t* v_row16(int64_t r) { return pages->v16_pool + pages->offset(r); }
  // Whatever the storage: `n` values of K (V) row r, starting `col` values in, as fp32 (bf16
  // widened exactly), and written from fp32 (rounded to nearest even into a bf16 pool).
  void read_kv(int64_t r, int kv_dim, int64_t col, int n, float* k_out, float* v_out) const;
  void write_kv(int64_t r, int kv_dim, int64_t col, int n, const float* k_in, const float* v_in);
  // The same for a transformer layer's row (layout above; kv_dim is one layer's).
  void read_layer_kv(int64_t r, int layer, int n_layers, int kv_dim, float* k_out, float* v_out) const {
    read_kv(r - r % kKvChunkRows, n_layers * kv_dim, layer_row_offset(r, layer, kv_dim), kv_dim, k_out, v_out);
  }
  void write_layer_kv(int64_t r, int layer, int n_layers, int kv_dim, const float* k_in, const float* v_in) {
    write_kv(r - r % kKvChunkRows, n_layers * kv_dim, layer_row_offset(r, layer, kv_dim), kv_dim, k_in, v_in);
  }
  int64_t kv_bytes() const { return static_cast<int64_t>(k.size() + v.size()) * 4; }
  int64_t self_state_bytes() const;
};

// A tensor-parallel rank (world > 1) holds only its heads: n_self_heads / world retention
// states, window rows of dim / world values. Its global K/V rows are kv_dim / world wide.
// A transformer's state starts with no `self` entries and no rows.
SequenceState make_sequence_state(const ModelConfig& c, int tp_world = 1);

// The hand-off format (handoff/state_blob.h holds the bytes; this maps a SequenceState onto
// them). A blob may carry no KV rows (state only, e.g. beside KV blocks in a store) or a row range.
// The shapes of `c` as the format records them (whole model, tensor-parallel world 1).
StateShape state_shape(const ModelConfig& c);

struct StateBlobOptions {
  bool include_kv = true;
  int64_t kv_row_begin = 0;
  int64_t kv_row_end = -1;  // −1: up to position
  KvDType kv_dtype = KvDType::kF32;
};

// For whole-model YOCO states (tensor-parallel world 1); a rank's shard has other shapes.
// Transformer states are not serialized (the caller must not pass one: checked, aborts).
std::vector<uint8_t> serialize_state(const SequenceState& st, const ModelConfig& c, uint64_t fingerprint,
                                     const StateBlobOptions& opt = {});

struct StateBlobInfo {
  uint64_t fingerprint = 0;
  int64_t position = 0, kv_row_begin = 0, kv_rows = 0;
  KvDType kv_dtype = KvDType::kF32;
};

// Validates everything (magic, version, checksum, fingerprint, every shape against the
// config) before touching `out`. KV rows present in the blob land at their row offsets; a
// blob with no KV rows leaves out.k / out.v empty for the caller to fill.
Result<StateBlobInfo> deserialize_state(std::span<const uint8_t> blob, const ModelConfig& c, uint64_t fingerprint,
                                        SequenceState& out);

}  // namespace yoco
