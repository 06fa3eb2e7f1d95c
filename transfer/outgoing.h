// The sender's bookkeeping, with no transport in it: one outgoing transfer (what was put, the
// row checksums, the state, the commit phases), the transfers that ended (for late calls), and
// the Waiter a caller blocks on while the transport's progress thread works. A transport
// (ucx_sender.cc) moves the bytes and asks these what to do next.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transfer/descriptor.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace yoco::transfer_detail {

// A result handed from the progress thread to a waiting caller.
struct Waiter {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  Status st;
  std::atomic<bool> abandoned{false};  // the caller stopped waiting

  void set(Status s) {
    std::lock_guard<std::mutex> lock(m);
    if (done) return;
    st = std::move(s);
    done = true;
    cv.notify_all();
  }
  // False when the deadline passed first.
  bool wait(TransferClock::time_point deadline, Status& out) {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_until(lock, deadline, [&] { return done; })) return false;
    out = st;
    return true;
  }
};

// Commit: wait for every operation (draining), flush the connection so they completed at the
// target (flushing), send kCommit and wait for the acknowledgement.
enum class CommitPhase { kNone, kDraining, kFlushing, kAwaitAck };

struct OutgoingTransfer {
  uint64_t id = 0;
  int64_t rows = 0, lease_unix_ms = 0;
  int64_t resident_rows = 0;   // already on the decode worker: never put, not in the checksum
  ReservationSecret secret{};  // from the descriptor: sent in every control message
  std::vector<uint32_t> row_crc;
  std::vector<uint8_t> written;
  int outstanding = 0;  // operations posted and not completed
  Status error;         // the first asynchronous failure; commit reports it
  bool has_state = false;
  uint64_t state_bytes = 0;
  uint32_t state_crc = 0;
  CommitPhase phase = CommitPhase::kNone;
  CommitMsg commit;
  std::shared_ptr<Waiter> waiter;
  TransferClock::time_point started;
  int64_t bytes = 0;

  explicit OutgoingTransfer(const ReservationDescriptor& d);

  // Rows [row_begin, +crcs.size()) were posted, with their checksums.
  void rows_put(int64_t row_begin, std::span<const uint32_t> crcs, int64_t kv_dim, KvDType dtype = KvDType::kF32);
  // The commit's checks (every row below rows_written put) and its message; then draining.
  // Not OK: the answer to the commit, the transfer unchanged.
  Status begin_commit(int64_t rows_written, const std::string& request_id, uint64_t fingerprint, bool row_checksums);
  // What the transport does next: nothing yet, finish with `error`, or flush (now kFlushing).
  enum class Step { kWait, kFail, kFlush };
  Step advance();
  // Never committed and past its lease by `grace_ms`: dropped.
  bool stale(int64_t now_unix_ms, int64_t grace_ms) const {
    return phase == CommitPhase::kNone && now_unix_ms > lease_unix_ms + grace_ms;
  }
};

// Failed or aborted transfers, remembered (the newest `capacity`) so a late put, state or
// commit for one gets its reason. Thread-safe: callers read it, the progress thread writes.
class EndedTransfers {
 public:
  explicit EndedTransfers(size_t capacity = 4096) : capacity_(capacity) {}
  void remember(uint64_t id, const Status& st);
  // OK when `id` has not ended.
  Status status(uint64_t id) const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Status> ended_;
  std::deque<uint64_t> order_;
};

}  // namespace yoco::transfer_detail
