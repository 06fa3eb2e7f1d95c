// The decode side's reservation table, with no transport in it (transfer/README.md, protocol
// and trust): blocks reserved with a lease and a secret, the rows and state that arrived, commit
// validation, failures and their tombstones, lease expiry, the hand-over to wait_committed.
// Events come in as decoded control messages; verdicts go out as the acknowledgements to send
// (`Acks`) and the reservation's phase. A transport (ucx_receiver.cc) only moves bytes: it
// decodes what arrived, asks here where rows go, and sends the acks it is handed.
// Thread-safe: events from the transport's progress thread, the API from the decode worker.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "handoff/block_pool.h"
#include "handoff/state_blob.h"
#include "transfer/descriptor.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace yoco::transfer_detail {

struct ReservationTableOptions {
  uint64_t fingerprint = 0;  // this worker's model: other models' commits are refused
  StateShape state_shape;    // what an admitted state blob must fit
  int64_t max_rows = 0;
  int64_t max_state_bytes = int64_t{1} << 30;
  bool verify_rows = true;  // recompute the K/V row checksum from the pool at commit
  int verify_threads = 2;
  int64_t verify_bytes_per_thread = int64_t{2} << 20;
  size_t max_tombstones = 4096;
};

// Where a reply goes: the transport's handle for the sender's connection (0: nowhere).
using ReplyTo = uintptr_t;
struct Ack {
  ReplyTo to = 0;
  uint64_t reservation_id = 0;
  Status status;
};
using Acks = std::vector<Ack>;

class ReservationTable {
 public:
  ReservationTable(KvBlockPool& pool, const ReservationTableOptions& opt);
  ~ReservationTable() { shutdown(); }
  // The transport stopped: fails what is open (kShutdown), gives back committed blocks never
  // claimed and draining ones. Idempotent.
  void shutdown();

  // What descriptors carry about the transport (its listener and, for push, the pool's keys).
  void set_endpoint(std::string address, std::vector<uint8_t> k_rkey, std::vector<uint8_t> v_rkey);

  // ---- the API (KvReceiver) ----
  Result<ReservationDescriptor> reserve(const std::string& request_id, int64_t rows,
                                        TransferClock::time_point lease_deadline, std::vector<int32_t> resident);
  Result<CommittedSequence> wait_committed(uint64_t reservation_id, TransferClock::time_point deadline);
  void cancel(uint64_t reservation_id);
  TransferMetrics& metrics() { return metrics_; }
  const TransferMetrics& metrics() const { return metrics_; }

  // ---- events; `conn` names the sender's connection (0: unknown) ----
  Acks begin(const BeginMsg& m, uint64_t conn);
  // A kState of `length` bytes: kRefused (drop any data), kInline (its data came with it: call
  // state_arrived now) or kFetch (fetch it, then state_arrived).
  enum class StateAdmission { kRefused, kInline, kFetch };
  StateAdmission state_announced(const StateMsg& m, size_t length, bool data_inline, uint64_t conn, Acks& acks);
  // `failure` empty: the blob arrived whole.
  Acks state_arrived(const StateMsg& m, std::vector<uint8_t> blob, std::string_view failure);
  // A rows message of `length` bytes: where its data goes in the pool (counted as pending
  // until rows_arrived), or null (refused; nothing is written).
  uint8_t* rows_landing(const RowsMsg& m, size_t length, Acks& acks);
  // The same as an fp32 pool's row pointer.
  float* rows_announced(const RowsMsg& m, size_t length, Acks& acks) {
    return reinterpret_cast<float*>(rows_landing(m, length, acks));
  }
  // Eager rows: copied into the pool here and marked arrived.
  Acks rows_landed(const RowsMsg& m, const void* data, size_t length);
  // The end of a fetch rows_announced accepted; `failure` empty: it arrived.
  Acks rows_arrived(const RowsMsg& m, std::string_view failure);
  Acks commit(const CommitMsg& m, ReplyTo reply);
  Acks abort(const AbortMsg& m);
  // The connection is gone: its open reservations fail (`failed` of them).
  Acks connection_failed(uint64_t conn, const std::string& why, int* failed);
  // Fails every open reservation whose lease ended by `now`.
  Acks expire(TransferClock::time_point now);

 private:
  enum class Phase { kOpen, kCommitted, kFailed };
  struct Reservation {
    uint64_t id = 0;
    std::string request_id;
    int64_t rows = 0;
    int64_t resident_rows = 0;    // leading rows already in place (never written by the sender)
    std::vector<int32_t> blocks;  // the reserved pool blocks, in row order
    TransferClock::time_point deadline, started;
    Phase phase = Phase::kOpen;
    std::vector<uint64_t> writers;  // connections that sent kBegin or kState for it
    bool state_pending = false, has_state = false;
    // Pull path: rows that arrived (bit 0 K, bit 1 V) and receives still writing into the blocks.
    std::vector<uint8_t> arrived;
    int pending_rows = 0;
    std::vector<uint8_t> state_blob;
    std::optional<std::pair<CommitMsg, ReplyTo>> deferred_commit;  // waits for the rows or state
    Status failure;
    std::vector<uint8_t> admitted_blob;  // the validated state blob, once committed
    ReservationSecret secret{};          // minted here; every message for it must carry it
  };

  // The open reservation `id` when `secret` is its own, else null (a message without the
  // secret changes nothing: it cannot fail the reservation either). Under mu_.
  Reservation* open_authorized_locked(uint64_t id, const ReservationSecret& secret);
  bool authorized_locked(const Reservation& r, const ReservationSecret& secret);
  // Where rows of `m` go, or null when they are not one contiguous run of the reservation (the
  // receiver never trusts the sender's idea of its memory).
  uint8_t* rows_destination_locked(Reservation& r, const RowsMsg& m, size_t length, Acks* acks);
  void process_commit_locked(const CommitMsg& m, ReplyTo reply, Acks& acks);
  // `acks` null: the caller cannot reply (not an event), so a deferred commit waits for its deadline.
  void fail_locked(Reservation& r, TransferError e, const std::string& detail, Acks* acks);
  std::vector<uint32_t> pool_row_crcs(const Reservation& r) const;

  KvBlockPool& pool_;
  const ReservationTableOptions opt_;
  TransferMetrics metrics_;
  std::string address_;
  std::vector<uint8_t> k_rkey_, v_rkey_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, Reservation> reservations_;
  std::deque<uint64_t> tombstones_;  // failed reservations, oldest first
  // Blocks of failed reservations that receives still write into: back to the pool when the
  // last one completes, never earlier.
  struct Draining {
    std::vector<int32_t> blocks;
    int pending = 0;
  };
  std::unordered_map<uint64_t, Draining> draining_;
  TransferClock::time_point next_expiry_ = TransferClock::time_point::max();
  uint64_t id_seed_ = 0, id_counter_ = 0;
};

}  // namespace yoco::transfer_detail
