// The KV transfer engine's interface (docs/design.md §3.4, 4; docs/architecture.md, rule 7): reserve / put / commit / abort.
// The decode side owns the destination memory: it reserves pool blocks and hands out a
// ReservationDescriptor; the prefill side pushes K/V rows and the state blob into them and
// commits. The decode side admits a sequence only after a complete, validated commit. UCX is the
// implementation (transfer/ucx_transport.h); services depend on this header only.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transfer/descriptor.h"

namespace yoco {

using TransferClock = std::chrono::steady_clock;

// Why a transfer did not complete. It travels in the commit acknowledgement and in abort
// messages, and is tagged into Status messages as "[name]" so callers can branch on it.
enum class TransferError : uint32_t {
  kNone = 0,
  kUnknownReservation,   // never reserved here, or already consumed
  kLeaseExpired,         // the lease ran out before a valid commit
  kAborted,              // the sender aborted
  kCancelled,            // the decode side cancelled
  kFingerprintMismatch,  // sender and receiver run different models
  kRequestMismatch,      // commit names another request than the reservation
  kRowCountMismatch,     // rows written != rows reserved
  kRowsIncomplete,       // the sender did not put every committed row
  kBadChecksum,          // control data or K/V rows do not match their checksum
  kBadState,             // the state blob does not deserialize or does not fit the rows
  kMissingState,         // commit before any state blob
  kStateTooLarge,        // state blob over the receiver's limit
  kPeerFailed,           // the UCX peer disconnected or failed
  kTimeout,              // a deadline passed
  kAlreadyCommitted,     // a second commit for an admitted sequence
  kShutdown,             // the engine is stopping
  kInvalid,              // bad arguments or an undecodable message
};

const char* transfer_error_name(TransferError e);
// A Status whose message is "[name] detail", with a code that fits the reason.
Status transfer_error(TransferError e, const std::string& detail);
// The reason tagged into a Status by transfer_error (kNone for OK, kInvalid when untagged).
TransferError transfer_error_of(const Status& st);

// Control messages the receiver refused outright (docs/design.md §4.5), by reason:
// yoco_transfer_refused_total{reason} on the decode worker.
enum class TransferRefusal : int {
  kBadSecret = 0,  // the message's secret is not the reservation's
  kReplay,         // a commit for a reservation that is not open (already committed, consumed, or never made)
  kOutOfRange,     // rows outside the blocks the receiver recorded for the reservation
  kCount
};
const char* transfer_refusal_name(TransferRefusal r);

// Counters the services export (docs/design.md §6: yoco_kv_transfer_bytes_total, _seconds, ...).
struct TransferMetricsSnapshot {
  int64_t bytes = 0;      // K/V row + state bytes of completed transfers
  int64_t transfers = 0;  // completed (committed and acknowledged) transfers
  int64_t failures = 0;   // rejected, expired, aborted, cancelled, peer failures, timeouts
  int64_t in_flight = 0;  // open reservations (receiver) or open transfers (sender)
  double seconds = 0;     // summed duration of completed transfers
  std::array<int64_t, static_cast<int>(TransferRefusal::kCount)> refused{};  // by TransferRefusal
};

class TransferMetrics {
 public:
  void observe_transfer(int64_t bytes, double seconds) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    transfers_.fetch_add(1, std::memory_order_relaxed);
    nanos_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }
  void count_failure() { failures_.fetch_add(1, std::memory_order_relaxed); }
  void add_in_flight(int64_t d) { in_flight_.fetch_add(d, std::memory_order_relaxed); }
  void count_refused(TransferRefusal r) { refused_[static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed); }
  TransferMetricsSnapshot snapshot() const {
    TransferMetricsSnapshot s{bytes_.load(), transfers_.load(), failures_.load(), in_flight_.load(),
                              nanos_.load() * 1e-9};
    for (size_t i = 0; i < s.refused.size(); ++i) s.refused[i] = refused_[i].load();
    return s;
  }

 private:
  std::atomic<int64_t> refused_[static_cast<int>(TransferRefusal::kCount)] = {};
  std::atomic<int64_t> bytes_{0}, transfers_{0}, failures_{0}, in_flight_{0}, nanos_{0};
};

// An admitted sequence: the reserved pool blocks, which now carry rows 0..rows−1, and the
// validated state blob at position = rows (handoff/state_blob.h: parsed, checksummed, for this
// model's fingerprint and shapes, no K/V rows inside). The decode side restores the engine state
// from the blob over the blocks (deserialize_state at admission). The caller owns the blocks and
// returns them with KvBlockPool::release_blocks.
struct CommittedSequence {
  uint64_t reservation_id = 0;
  std::string request_id;
  int64_t rows = 0;
  std::vector<int32_t> blocks;
  std::vector<uint8_t> state_blob;
};

// Decode side.
class KvReceiver {
 public:
  virtual ~KvReceiver() = default;
  // The endpoint senders connect to, "host:port" (also inside every descriptor).
  virtual const std::string& address() const = 0;
  // Takes blocks for `rows` rows from the pool, all or nothing (RESOURCE_EXHAUSTED). The
  // reservation expires by itself at lease_deadline unless a valid commit came first; an
  // expired, rejected, aborted or cancelled reservation returns its blocks to the pool.
  virtual Result<ReservationDescriptor> reserve(const std::string& request_id, int64_t rows,
                                                TransferClock::time_point lease_deadline) = 0;
  // The same over a prefix the caller already holds in the pool (docs/design.md, resident
  // prefixes): `resident` blocks carry rows [0, resident.size() · block_size), which the sender
  // then neither puts nor may overwrite (descriptor resident_rows). The caller's holds on them
  // move into the reservation (the commit hands them back among its blocks; a failure releases
  // them) when it succeeds; on an error they stay the caller's.
  virtual Result<ReservationDescriptor> reserve_over(const std::string& request_id, int64_t rows,
                                                     TransferClock::time_point lease_deadline,
                                                     std::vector<int32_t> resident) = 0;
  // Blocks until the reservation is committed (the sequence, handed over exactly once), has
  // failed (the reason), or `deadline` passes (kTimeout; the reservation stays, under its lease).
  virtual Result<CommittedSequence> wait_committed(uint64_t reservation_id, TransferClock::time_point deadline) = 0;
  // Drops the reservation whatever its phase; its blocks go back to the pool.
  virtual void cancel(uint64_t reservation_id) = 0;
  // Reservations not yet committed or failed.
  virtual int64_t in_flight() const = 0;
  virtual const TransferMetrics& metrics() const = 0;
};

// Prefill side. Calls for different reservations may come from different threads.
class KvSender {
 public:
  virtual ~KvSender() = default;
  // Pushes rows [row_begin, row_begin + n_rows) (each kv_dim fp32 values, contiguous) into the
  // reserved blocks. Pipelined: returns once the puts are handed to the transport, and the
  // caller's buffers may be reused at once (they are staged). Refused after the lease.
  virtual Status put_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                          const float* v_rows) = 0;
  // put_rows without the staging copy: the rows are read where they are, so they must stay alive
  // and unchanged until the sender drops `hold`, which it does once every operation reading them
  // has completed (landed, failed, or torn down with the sender), whatever the transfer's outcome.
  // The receiver's checks are the same. This default stages them like put_rows.
  virtual Status put_rows_in_place(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                                   const float* v_rows, std::shared_ptr<const void> hold) {
    (void)hold;
    return put_rows(d, row_begin, n_rows, k_rows, v_rows);
  }
  // Sends the state blob (handoff/state_blob.h, no K/V rows inside); copied, so the span
  // may go away on return.
  virtual Status put_state(const ReservationDescriptor& d, std::span<const uint8_t> state_blob) = 0;
  // Waits for every put and the state to land, then sends the commit and waits for the
  // receiver's verdict: OK when the sequence is admitted, else the reason.
  virtual Status commit(const ReservationDescriptor& d, int64_t rows_written, TransferClock::time_point deadline) = 0;
  // Best effort: tells the receiver to drop the reservation; local state is dropped too.
  virtual void abort(const ReservationDescriptor& d, const std::string& reason) = 0;
  virtual int64_t in_flight() const = 0;
  virtual const TransferMetrics& metrics() const = 0;
};

}  // namespace yoco
