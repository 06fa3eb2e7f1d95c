// What a decode worker hands out when it reserves KV blocks for a sequence, and what a prefill
// worker needs to push rows into them (docs/design.md §3.4 step 1). It travels inside RPCs, so it is a
// value type with a versioned, checksummed byte form, and parsing trusts nothing.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "handoff/kv_rows.h"

namespace yoco {

// Rows [row, row + rows) of a sequence that are contiguous in the pool arrays, at byte `offset`.
struct RowRun {
  int64_t row = 0;
  int64_t rows = 0;
  uint64_t offset = 0;
};

// Bytes of one sequence row in the pool: its K row and its V row of kv_dim values each, fp32
// unless the pool is 16-bit.
inline int64_t kv_row_bytes(int64_t kv_dim, KvDType dtype = KvDType::kF32) {
  return 2 * kv_dim * static_cast<int64_t>(kv_dtype_bytes(dtype));
}

// The reservation's capability (docs/design.md §4.5): 128 bits from the kernel CSPRNG, minted by
// the decode worker; every control message that names the reservation must carry it.
using ReservationSecret = std::array<uint8_t, 16>;

// A fresh secret from getrandom(2); aborts the process if the kernel has no entropy source.
ReservationSecret mint_reservation_secret();
// Constant-time comparison (no early exit on the first differing byte).
bool secret_equal(const ReservationSecret& a, const ReservationSecret& b);

struct ReservationDescriptor {
  uint64_t reservation_id = 0;
  std::string request_id;
  uint64_t fingerprint = 0;             // the decode worker's model fingerprint
  int32_t kv_dim = 0;                   // values per K (and per V) row
  KvDType kv_dtype = KvDType::kF32;     // how the pool keeps them: the sender converts to it
  int32_t block_size = 0;               // rows per pool block
  int32_t pool_blocks = 0;              // blocks in the remote pool: bounds every block id
  int64_t rows = 0;                     // rows expected (the prompt length)
  std::vector<int32_t> blocks;          // reserved blocks in row order: row r is in blocks[r / block_size]
  std::string address;                  // the decode worker's UCX listener, "host:port"
  uint64_t k_base = 0, v_base = 0;      // remote addresses of the K and V pool arrays
  std::vector<uint8_t> k_rkey, v_rkey;  // packed UCX remote keys for those arrays; empty: pull only
  int64_t lease_deadline_unix_ms = 0;   // wall clock: the reservation is gone after this
  ReservationSecret secret{};           // the capability; the block list above is only a hint
  // Leading rows the decode worker already holds (whole blocks of a prefix resident in its
  // pool, docs/design.md, resident prefixes): the sender neither puts nor checksums them, the
  // receiver refuses rows below it. A multiple of block_size, at most rows.
  int64_t resident_rows = 0;

  int64_t row_bytes() const { return kv_row_bytes(kv_dim, kv_dtype) / 2; }  // one K (or V) row
  // Byte offset of row r from the start of a pool array.
  uint64_t row_offset(int64_t r) const {
    return (static_cast<uint64_t>(blocks[r / block_size]) * block_size + r % block_size) * row_bytes();
  }

  // Rows [row_begin, row_begin + n_rows) as the fewest contiguous runs: whole blocks, merged
  // across blocks whose ids follow each other, so a transfer is a few large puts, never one per row.
  std::vector<RowRun> contiguous_runs(int64_t row_begin, int64_t n_rows) const;

  // Version 2, little-endian: magic "YOCORSV1", u32 version, u32 total bytes, the fields above
  // (the 16 secret bytes after v_base), u32 CRC32C of everything before it. Version 3: the same
  // with i64 resident_rows after the block ids, written only when resident_rows > 0 (so a
  // descriptor without resident rows is byte for byte version 2). Version 4: the version 3
  // layout (resident_rows always present, 0 allowed) then u32 kv_dtype (1: bf16), written only
  // for a 16-bit pool (docs/design.md, 16-bit K/V). Version 1 is refused.
  std::vector<uint8_t> serialize() const;
  // Checks sizes, counts, ranges, uniqueness of blocks and the checksum; the error names the field.
  static Result<ReservationDescriptor> parse(std::span<const uint8_t> bytes);
  // The field checks of parse, for descriptors built in memory.
  Status validate() const;
};

// The lease is wall clock (it crosses machines; ReservationDescriptor::lease_deadline_unix_ms);
// waits are on the steady clock. These are the only conversions between the two.
int64_t lease_deadline_unix_ms(std::chrono::steady_clock::time_point deadline);
std::chrono::steady_clock::time_point lease_deadline_steady(const ReservationDescriptor& d);
bool lease_over(const ReservationDescriptor& d);

// "host:port" or "[v6 host]:port" → (host, port); port in 1..65535.
Result<std::pair<std::string, int>> split_host_port(const std::string& address);

}  // namespace yoco
