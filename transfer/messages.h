// Control messages of the push protocol, carried as UCX active-message headers (the state blob
// rides as the data of kState). Each ends with a CRC32C over its bytes; decoding checks it and
// every length before trusting a field. Every message the sender sends carries the reservation's
// secret right after the reservation id (docs/design.md §4.5); the CRC only catches corruption,
// the secret is what authorizes. Internal to transfer/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transfer/transport.h"

namespace yoco::transfer_detail {

// Active-message ids (sender → receiver, and kAck back).
enum AmId : unsigned { kAmBegin = 1, kAmState = 2, kAmCommit = 3, kAmAbort = 4, kAmAck = 5, kAmRows = 6 };

// First message of a transfer on an endpoint: binds the reservation to that endpoint, so the
// receiver fails it at once if the endpoint dies, and rejects a model mismatch before any commit.
struct BeginMsg {
  uint64_t reservation_id = 0;
  ReservationSecret secret{};
  uint64_t fingerprint = 0;
};

// K (which = 0) or V (which = 1) rows [row, row + rows) as the message's data, contiguous in
// the receiver's pool (the pull path: the receiver fetches them into blocks it checked).
struct RowsMsg {
  uint64_t reservation_id = 0;
  ReservationSecret secret{};
  uint8_t which = 0;
  int64_t row = 0;
  int64_t rows = 0;
};

struct StateMsg {
  uint64_t reservation_id = 0;
  ReservationSecret secret{};
  uint64_t bytes = 0;
  uint32_t blob_crc = 0;
};

struct CommitMsg {
  uint64_t reservation_id = 0;
  ReservationSecret secret{};
  std::string request_id;
  uint64_t fingerprint = 0;
  int64_t rows_written = 0;
  uint64_t state_bytes = 0;
  uint32_t state_crc = 0;
  uint32_t rows_crc = 0;  // combine_row_crcs over rows 0..rows_written−1, when has_rows_crc
  bool has_rows_crc = true;
};

struct AbortMsg {
  uint64_t reservation_id = 0;
  ReservationSecret secret{};
  TransferError reason = TransferError::kAborted;
  std::string message;
};

struct AckMsg {
  uint64_t reservation_id = 0;
  TransferError reason = TransferError::kNone;  // kNone: admitted
  std::string message;
};

std::vector<uint8_t> encode(const BeginMsg& m);
std::vector<uint8_t> encode(const StateMsg& m);
std::vector<uint8_t> encode(const RowsMsg& m);
std::vector<uint8_t> encode(const CommitMsg& m);
std::vector<uint8_t> encode(const AbortMsg& m);
std::vector<uint8_t> encode(const AckMsg& m);

// Errors are tagged kBadChecksum (checksum) or kInvalid (shape).
Result<BeginMsg> decode_begin(std::span<const uint8_t> b);
Result<StateMsg> decode_state(std::span<const uint8_t> b);
Result<RowsMsg> decode_rows(std::span<const uint8_t> b);
Result<CommitMsg> decode_commit(std::span<const uint8_t> b);
Result<AbortMsg> decode_abort(std::span<const uint8_t> b);
Result<AckMsg> decode_ack(std::span<const uint8_t> b);
// The reservation id of a message that failed to decode, if its bytes reach that far (to
// address the rejection); 0 otherwise.
uint64_t peek_reservation_id(std::span<const uint8_t> b);

// The K/V row checksum: per row crc32c(K row, then V row), combined as crc32c over the
// per-row values (u32 little-endian) in row order. Order-free to compute, so chunks may arrive
// in any order and rewrites count once.
uint32_t row_crc(const float* k_row, const float* v_row, int kv_dim);
// The same over rows of `row_bytes` each, whatever their dtype (a 16-bit pool's).
uint32_t row_crc_bytes(const void* k_row, const void* v_row, size_t row_bytes);
uint32_t combine_row_crcs(std::span<const uint32_t> per_row);

}  // namespace yoco::transfer_detail
