#include "transfer/messages.h"

#include <cstring>

#include "common/checksum.h"
#include "handoff/bytes.h"

namespace yoco::transfer_detail {

namespace {

constexpr uint32_t kMagic = 0x4d434f59;  // "YOCM"
constexpr size_t kMaxText = 1024;

ByteWriter start(AmId kind) {
  ByteWriter w;
  w.put<uint32_t>(kMagic);
  w.put<uint8_t>(static_cast<uint8_t>(kind));
  return w;
}

std::vector<uint8_t> finish(ByteWriter& w) {
  w.put<uint32_t>(crc32c(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

// Checks magic, kind and checksum; returns a reader over the fields.
Result<ByteReader> open(std::span<const uint8_t> b, AmId kind, const char* what) {
  if (b.size() < 9) return transfer_error(TransferError::kInvalid, std::string(what) + ": truncated message");
  ByteReader head(b);
  uint32_t magic = 0;
  uint8_t k = 0;
  head.get(magic);
  head.get(k);
  uint32_t crc = 0;
  ByteReader(b.subspan(b.size() - 4)).get(crc);
  if (crc32c(b.data(), b.size() - 4) != crc)
    return transfer_error(TransferError::kBadChecksum, std::string(what) + ": checksum mismatch");
  if (magic != kMagic || k != kind)
    return transfer_error(TransferError::kInvalid, std::string(what) + ": bad magic or kind");
  return ByteReader(b.subspan(5, b.size() - 9));
}

void put_secret(ByteWriter& w, const ReservationSecret& s) { w.put_raw(s.data(), s.size()); }

bool get_secret(ByteReader& r, ReservationSecret& out) {
  std::span<const uint8_t> b;
  if (!r.take(out.size(), b)) return false;
  std::memcpy(out.data(), b.data(), out.size());
  return true;
}

Status bad_shape(const char* what) {
  return transfer_error(TransferError::kInvalid, std::string(what) + ": bad field or trailing bytes");
}

bool valid_reason(uint32_t r) { return r <= static_cast<uint32_t>(TransferError::kInvalid); }

}  // namespace

std::vector<uint8_t> encode(const BeginMsg& m) {
  auto w = start(kAmBegin);
  w.put(m.reservation_id);
  put_secret(w, m.secret);
  w.put(m.fingerprint);
  return finish(w);
}

std::vector<uint8_t> encode(const StateMsg& m) {
  auto w = start(kAmState);
  w.put(m.reservation_id);
  put_secret(w, m.secret);
  w.put(m.bytes);
  w.put(m.blob_crc);
  return finish(w);
}

std::vector<uint8_t> encode(const RowsMsg& m) {
  auto w = start(kAmRows);
  w.put(m.reservation_id);
  put_secret(w, m.secret);
  w.put(m.which);
  w.put(m.row);
  w.put(m.rows);
  return finish(w);
}

std::vector<uint8_t> encode(const CommitMsg& m) {
  auto w = start(kAmCommit);
  w.put(m.reservation_id);
  put_secret(w, m.secret);
  w.put_string(m.request_id);
  w.put(m.fingerprint);
  w.put(m.rows_written);
  w.put(m.state_bytes);
  w.put(m.state_crc);
  w.put(m.rows_crc);
  w.put<uint8_t>(m.has_rows_crc ? 1 : 0);
  return finish(w);
}

std::vector<uint8_t> encode(const AbortMsg& m) {
  auto w = start(kAmAbort);
  w.put(m.reservation_id);
  put_secret(w, m.secret);
  w.put(static_cast<uint32_t>(m.reason));
  w.put_string(m.message.substr(0, kMaxText));
  return finish(w);
}

std::vector<uint8_t> encode(const AckMsg& m) {
  auto w = start(kAmAck);
  w.put(m.reservation_id);
  w.put(static_cast<uint32_t>(m.reason));
  w.put_string(m.message.substr(0, kMaxText));
  return finish(w);
}

Result<BeginMsg> decode_begin(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmBegin, "begin"));
  BeginMsg m;
  if (!(r.get(m.reservation_id) && get_secret(r, m.secret) && r.get(m.fingerprint)) || r.remaining() != 0)
    return bad_shape("begin");
  return m;
}

Result<StateMsg> decode_state(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmState, "state"));
  StateMsg m;
  if (!(r.get(m.reservation_id) && get_secret(r, m.secret) && r.get(m.bytes) && r.get(m.blob_crc)) ||
      r.remaining() != 0)
    return bad_shape("state");
  return m;
}

Result<RowsMsg> decode_rows(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmRows, "rows"));
  RowsMsg m;
  if (!(r.get(m.reservation_id) && get_secret(r, m.secret) && r.get(m.which) && r.get(m.row) && r.get(m.rows)) ||
      r.remaining() != 0 || m.which > 1)
    return bad_shape("rows");
  return m;
}

Result<CommitMsg> decode_commit(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmCommit, "commit"));
  CommitMsg m;
  uint8_t has_crc = 0;
  if (!(r.get(m.reservation_id) && get_secret(r, m.secret) && r.get_string(m.request_id, kMaxText) &&
        r.get(m.fingerprint) && r.get(m.rows_written) && r.get(m.state_bytes) && r.get(m.state_crc) &&
        r.get(m.rows_crc) && r.get(has_crc)) ||
      r.remaining() != 0 || has_crc > 1)
    return bad_shape("commit");
  m.has_rows_crc = has_crc == 1;
  return m;
}

Result<AbortMsg> decode_abort(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmAbort, "abort"));
  AbortMsg m;
  uint32_t reason = 0;
  if (!(r.get(m.reservation_id) && get_secret(r, m.secret) && r.get(reason) && r.get_string(m.message, kMaxText)) ||
      r.remaining() != 0 || !valid_reason(reason))
    return bad_shape("abort");
  m.reason = static_cast<TransferError>(reason);
  return m;
}

Result<AckMsg> decode_ack(std::span<const uint8_t> b) {
  YOCO_ASSIGN_OR_RETURN(ByteReader r, open(b, kAmAck, "ack"));
  AckMsg m;
  uint32_t reason = 0;
  if (!(r.get(m.reservation_id) && r.get(reason) && r.get_string(m.message, kMaxText)) || r.remaining() != 0 ||
      !valid_reason(reason))
    return bad_shape("ack");
  m.reason = static_cast<TransferError>(reason);
  return m;
}

uint64_t peek_reservation_id(std::span<const uint8_t> b) {
  if (b.size() < 13) return 0;
  uint64_t id = 0;
  ByteReader(b.subspan(5)).get(id);
  return id;
}

uint32_t row_crc(const float* k_row, const float* v_row, int kv_dim) {
  return row_crc_bytes(k_row, v_row, static_cast<size_t>(kv_dim) * 4);
}

uint32_t row_crc_bytes(const void* k_row, const void* v_row, size_t row_bytes) {
  return crc32c(v_row, row_bytes, crc32c(k_row, row_bytes));
}

uint32_t combine_row_crcs(std::span<const uint32_t> per_row) {
  uint32_t crc = 0;
  uint8_t buf[4 * 256];
  size_t i = 0;
  while (i < per_row.size()) {
    const size_t n = std::min<size_t>(256, per_row.size() - i);
    for (size_t j = 0; j < n; ++j) store_le<uint32_t>(buf + 4 * j, per_row[i + j]);
    crc = crc32c(buf, 4 * n, crc);
    i += n;
  }
  return crc;
}

}  // namespace yoco::transfer_detail
