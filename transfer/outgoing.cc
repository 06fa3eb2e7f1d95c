#include "transfer/outgoing.h"

#include <algorithm>

namespace yoco::transfer_detail {

OutgoingTransfer::OutgoingTransfer(const ReservationDescriptor& d)
    : id(d.reservation_id),
      rows(d.rows),
      lease_unix_ms(d.lease_deadline_unix_ms),
      resident_rows(d.resident_rows),
      secret(d.secret),
      row_crc(d.rows, 0),
      written(d.rows, 0),
      started(TransferClock::now()) {
  std::fill(written.begin(), written.begin() + d.resident_rows, uint8_t{1});
}

void OutgoingTransfer::rows_put(int64_t row_begin, std::span<const uint32_t> crcs, int64_t kv_dim, KvDType dtype) {
  for (size_t i = 0; i < crcs.size(); ++i) {
    row_crc[row_begin + i] = crcs[i];
    written[row_begin + i] = 1;
  }
  bytes += static_cast<int64_t>(crcs.size()) * kv_row_bytes(kv_dim, dtype);
}

Status OutgoingTransfer::begin_commit(int64_t rows_written, const std::string& request_id, uint64_t fingerprint,
                                      bool row_checksums) {
  if (phase != CommitPhase::kNone) return transfer_error(TransferError::kInvalid, "commit already in progress");
  if (rows_written <= 0 || rows_written < resident_rows || rows_written > rows)
    return transfer_error(TransferError::kRowsIncomplete,
                          std::to_string(rows_written) + " rows committed, " + std::to_string(rows) + " reserved");
  for (int64_t r = 0; r < rows_written; ++r)
    if (!written[r])
      return transfer_error(TransferError::kRowsIncomplete, "row " + std::to_string(r) + " was never put");
  commit = CommitMsg{id,
                     secret,
                     request_id,
                     fingerprint,
                     rows_written,
                     state_bytes,
                     state_crc,
                     row_checksums ? combine_row_crcs(std::span<const uint32_t>(row_crc.data() + resident_rows,
                                                                                rows_written - resident_rows))
                                   : 0,
                     row_checksums};
  phase = CommitPhase::kDraining;
  return Status::Ok();
}

OutgoingTransfer::Step OutgoingTransfer::advance() {
  if (phase == CommitPhase::kNone) return Step::kWait;
  if (!error.ok()) return Step::kFail;
  if (phase != CommitPhase::kDraining || outstanding > 0) return Step::kWait;
  phase = CommitPhase::kFlushing;
  return Step::kFlush;
}

void EndedTransfers::remember(uint64_t id, const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ended_.emplace(id, st).second) return;
  order_.push_back(id);
  while (order_.size() > capacity_) {
    ended_.erase(order_.front());
    order_.pop_front();
  }
}

Status EndedTransfers::status(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ended_.find(id);
  return it == ended_.end() ? Status::Ok() : it->second;
}

}  // namespace yoco::transfer_detail
