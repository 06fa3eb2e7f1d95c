// The hand-off format of a sequence's state (docs/design.md, hand-off format): what a prefill
// worker ships to a decode worker and what the KV store keeps. This layer knows the bytes and
// the shapes as plain numbers, never the engine: model/state.h maps a SequenceState onto it,
// while transfer/ and kv_store/ handle blobs, their headers and K/V rows through it.
//
// Version 1, little-endian:
//   header  magic "YOCOSEQ1", u32 version, u32 header bytes, u64 model fingerprint,
//           i64 position, i64 first KV row, i64 KV rows, u32 KV dtype (0 f32, 1 bf16),
//           u32 kv_dim, u32 dim, u32 n_loops, u32 n_self_layers, u32 mixer (0 gRet, 1 SWA),
//           u32 n_self_heads, u32 self head dim, u32 window, u32 has_last_hidden
//   payload K rows, V rows, then per (loop, layer): gRet S (f32) | SWA u32 rows + k rows + v rows
//           (f32, oldest first, exactly min(position, window − 1)), then last_hidden (f32)
//   trailer u32 CRC32C of everything before it
// A blob may carry no KV rows (state only, e.g. beside KV blocks in a store) or a row range.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "handoff/bytes.h"
#include "handoff/kv_rows.h"

namespace yoco {

enum class SelfMixer : uint32_t { kGatedRetention = 0, kSlidingWindow = 1 };

// The model's shapes a blob records; a reader compares them with its own model's.
struct StateShape {
  uint32_t kv_dim = 0;  // floats per global K (and V) row
  uint32_t dim = 0;     // model width: window rows and last_hidden
  uint32_t n_loops = 0, n_self_layers = 0;
  SelfMixer mixer = SelfMixer::kGatedRetention;
  uint32_t n_self_heads = 0, self_head_dim = 0;
  uint32_t window = 0;  // sliding window W (the format keeps W − 1 rows)

  int64_t self_layers() const { return static_cast<int64_t>(n_loops) * n_self_layers; }
  int64_t retention_floats() const { return static_cast<int64_t>(n_self_heads) * self_head_dim * self_head_dim; }
  // Window rows a state at `position` keeps per layer.
  int64_t window_rows(int64_t position) const {
    const int64_t keep = static_cast<int64_t>(window) - 1;
    return position < keep ? position : keep;
  }
  bool operator==(const StateShape&) const = default;
};

struct StateBlobHeader {
  uint64_t fingerprint = 0;
  int64_t position = 0;      // tokens consumed
  int64_t kv_row_begin = 0;  // KV rows [kv_row_begin, kv_row_begin + kv_rows) are inside
  int64_t kv_rows = 0;
  KvDType kv_dtype = KvDType::kF32;
  StateShape shape;
  bool has_last_hidden = false;
};

// Writes one blob, section by section in the order above; the caller supplies exactly the
// counts the header announces (checked by finish()).
class StateBlobWriter {
 public:
  explicit StateBlobWriter(const StateBlobHeader& h);
  void put_kv_row(const float* row);      // kv_dim values in the header's dtype: K rows, then V rows
  void put_retention(const float* s);     // one gRet layer: retention_floats() values
  void put_window_rows(uint32_t rows);    // one SWA layer: its row count, then its k rows, then its v rows
  void put_window_row(const float* row);  // dim values
  void put_last_hidden(const float* h);   // dim values
  // Appends the checksum and hands the bytes over.
  std::vector<uint8_t> finish();

 private:
  StateBlobHeader h_;
  ByteWriter w_;
  int64_t kv_rows_ = 0, layers_ = 0, window_rows_ = 0, hidden_ = 0;
};

// One self-decoder layer's bytes (spans into the blob).
struct SelfLayerBytes {
  std::span<const uint8_t> retention;           // gRet: retention_floats() f32
  uint32_t window_rows = 0;                     // SWA: rows, oldest first
  std::span<const uint8_t> window_k, window_v;  // SWA: [window_rows, dim] f32 each
};

// A checked blob: the header and where each section lies.
struct StateBlobView {
  StateBlobHeader header;
  std::span<const uint8_t> k_rows, v_rows;  // [kv_rows, kv_dim] in kv_dtype each
  std::vector<SelfLayerBytes> self;         // self_layers(), loop-major
  std::span<const uint8_t> last_hidden;     // dim f32, or empty
};

// Checks everything the bytes alone can tell (length, magic, checksum, version, header size,
// dtype, row range, every section's size, no trailing bytes): DATA_LOSS "state blob: ..." naming
// the field. The view points into `blob`.
Result<StateBlobView> parse_state_blob(std::span<const uint8_t> blob);

// The blob is for this model: FAILED_PRECONDITION naming the first field that differs.
Status check_state_blob_model(const StateBlobHeader& h, uint64_t fingerprint, const StateShape& shape);

// fp32 values of a section (n values from 4n bytes).
void read_f32(std::span<const uint8_t> bytes, float* out);

}  // namespace yoco
