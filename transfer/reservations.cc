#include "transfer/reservations.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "common/log.h"

namespace yoco::transfer_detail {

using Clock = TransferClock;

ReservationTable::ReservationTable(KvBlockPool& pool, const ReservationTableOptions& opt) : pool_(pool), opt_(opt) {
  std::random_device rd;
  id_seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

void ReservationTable::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, r] : reservations_) {
    if (r.phase == Phase::kOpen) fail_locked(r, TransferError::kShutdown, "receiver stopped", nullptr);
    if (r.phase == Phase::kCommitted) pool_.release_blocks(r.blocks);  // admitted but never claimed
  }
  reservations_.clear();
  for (auto& [id, d] : draining_) pool_.release_blocks(d.blocks);  // the transport no longer progresses
  draining_.clear();
  cv_.notify_all();
}

void ReservationTable::set_endpoint(std::string address, std::vector<uint8_t> k_rkey, std::vector<uint8_t> v_rkey) {
  std::lock_guard<std::mutex> lock(mu_);
  address_ = std::move(address);
  k_rkey_ = std::move(k_rkey);
  v_rkey_ = std::move(v_rkey);
}

// ---- API ---------------------------------------------------------------------------------

Result<ReservationDescriptor> ReservationTable::reserve(const std::string& request_id, int64_t rows,
                                                        Clock::time_point lease_deadline,
                                                        std::vector<int32_t> resident) {
  if (request_id.empty() || request_id.size() > 256)
    return transfer_error(TransferError::kInvalid, "request_id must be 1..256 bytes");
  if (rows <= 0 || rows > opt_.max_rows)
    return transfer_error(TransferError::kInvalid, "rows " + std::to_string(rows) + " out of range");
  if (lease_deadline <= Clock::now()) return transfer_error(TransferError::kInvalid, "lease_deadline already passed");
  const int64_t resident_rows = static_cast<int64_t>(resident.size()) * pool_.block_size();
  if (resident_rows > rows)
    return transfer_error(TransferError::kInvalid, "resident blocks: " + std::to_string(resident.size()) +
                                                       " hold more than the " + std::to_string(rows) + " rows");
  YOCO_ASSIGN_OR_RETURN(std::vector<int32_t> blocks, pool_.allocate_blocks(rows - resident_rows));
  blocks.insert(blocks.begin(), resident.begin(), resident.end());

  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = 0;
  while (id == 0 || reservations_.count(id)) id = mix64(id_seed_, ++id_counter_);
  ReservationDescriptor d;
  d.reservation_id = id;
  d.request_id = request_id;
  d.fingerprint = opt_.fingerprint;
  d.kv_dim = pool_.row_floats();
  d.kv_dtype = pool_.kv_dtype();
  d.block_size = pool_.block_size();
  d.pool_blocks = pool_.total_blocks();
  d.rows = rows;
  d.blocks = blocks;
  d.address = address_;
  d.k_base = reinterpret_cast<uint64_t>(pool_.k_bytes());
  d.v_base = reinterpret_cast<uint64_t>(pool_.v_bytes());
  d.k_rkey = k_rkey_;
  d.v_rkey = v_rkey_;
  d.lease_deadline_unix_ms = lease_deadline_unix_ms(lease_deadline);
  d.secret = mint_reservation_secret();
  d.resident_rows = resident_rows;

  Reservation r;
  r.id = id;
  r.request_id = request_id;
  r.rows = rows;
  r.resident_rows = resident_rows;
  r.blocks = std::move(blocks);
  r.deadline = lease_deadline;
  r.started = Clock::now();
  r.secret = d.secret;
  reservations_.emplace(id, std::move(r));
  next_expiry_ = std::min(next_expiry_, lease_deadline);
  metrics_.add_in_flight(1);
  YOCO_HOP("transfer.reserve", request_id, .kv("reservation", id).kv("rows", rows).kv("resident_rows", resident_rows));
  return d;
}

Result<CommittedSequence> ReservationTable::wait_committed(uint64_t reservation_id, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end())
      return transfer_error(TransferError::kUnknownReservation, "reservation " + std::to_string(reservation_id));
    Reservation& r = it->second;
    if (r.phase == Phase::kCommitted) {
      CommittedSequence c{r.id, r.request_id, r.rows, std::move(r.blocks), std::move(r.admitted_blob)};
      reservations_.erase(it);
      return c;
    }
    if (r.phase == Phase::kFailed) {
      Status st = r.failure;
      reservations_.erase(it);
      return st;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      auto again = reservations_.find(reservation_id);
      if (again != reservations_.end() && again->second.phase == Phase::kOpen)
        return transfer_error(TransferError::kTimeout,
                              "no commit for reservation " + std::to_string(reservation_id) + " by the deadline");
    }
  }
}

void ReservationTable::cancel(uint64_t reservation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return;
  Reservation& r = it->second;
  if (r.phase == Phase::kOpen) {
    fail_locked(r, TransferError::kCancelled, "cancelled by the decode side", nullptr);
  } else if (r.phase == Phase::kCommitted) {
    pool_.release_blocks(r.blocks);
    reservations_.erase(it);
  } else {
    reservations_.erase(it);
  }
}

// ---- events ------------------------------------------------------------------------------

ReservationTable::Reservation* ReservationTable::open_authorized_locked(uint64_t id, const ReservationSecret& secret) {
  auto it = reservations_.find(id);
  if (it == reservations_.end() || it->second.phase != Phase::kOpen) return nullptr;
  return authorized_locked(it->second, secret) ? &it->second : nullptr;
}

bool ReservationTable::authorized_locked(const Reservation& r, const ReservationSecret& secret) {
  if (secret_equal(r.secret, secret)) return true;
  metrics_.count_refused(TransferRefusal::kBadSecret);
  return false;
}

Acks ReservationTable::begin(const BeginMsg& m, uint64_t conn) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  Reservation* r = open_authorized_locked(m.reservation_id, m.secret);
  if (r == nullptr) return acks;
  if (r->writers.empty()) r->started = Clock::now();  // transfer time runs from the first write
  if (conn && std::find(r->writers.begin(), r->writers.end(), conn) == r->writers.end()) r->writers.push_back(conn);
  if (m.fingerprint != opt_.fingerprint)
    fail_locked(*r, TransferError::kFingerprintMismatch,
                "sender model " + std::to_string(m.fingerprint) + " != " + std::to_string(opt_.fingerprint), &acks);
  return acks;
}

ReservationTable::StateAdmission ReservationTable::state_announced(const StateMsg& m, size_t length, bool data_inline,
                                                                   uint64_t conn, Acks& acks) {
  std::lock_guard<std::mutex> lock(mu_);
  Reservation* r = open_authorized_locked(m.reservation_id, m.secret);
  if (r == nullptr) return StateAdmission::kRefused;
  if (conn && std::find(r->writers.begin(), r->writers.end(), conn) == r->writers.end()) r->writers.push_back(conn);
  if (r->has_state || r->state_pending) {
    fail_locked(*r, TransferError::kInvalid, "second state blob", &acks);
    return StateAdmission::kRefused;
  }
  if (static_cast<int64_t>(length) > opt_.max_state_bytes || m.bytes != length) {
    fail_locked(*r, length != m.bytes ? TransferError::kBadChecksum : TransferError::kStateTooLarge,
                "state blob of " + std::to_string(length) + " bytes (announced " + std::to_string(m.bytes) +
                    ", limit " + std::to_string(opt_.max_state_bytes) + ")",
                &acks);
    return StateAdmission::kRefused;
  }
  if (data_inline) return StateAdmission::kInline;
  r->state_pending = true;
  return StateAdmission::kFetch;
}

Acks ReservationTable::state_arrived(const StateMsg& msg, std::vector<uint8_t> blob, std::string_view failure) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(msg.reservation_id);
  if (it == reservations_.end() || it->second.phase != Phase::kOpen) return acks;
  Reservation& r = it->second;
  r.state_pending = false;
  if (!failure.empty()) {
    fail_locked(r, TransferError::kPeerFailed, "state blob receive failed: " + std::string(failure), &acks);
    return acks;
  }
  if (blob.size() != msg.bytes || crc32c(blob.data(), blob.size()) != msg.blob_crc) {
    fail_locked(r, TransferError::kBadChecksum, "state blob checksum mismatch", &acks);
    return acks;
  }
  r.state_blob = std::move(blob);
  r.has_state = true;
  if (r.deferred_commit && r.pending_rows == 0) {
    auto [m, reply] = std::move(*r.deferred_commit);
    r.deferred_commit.reset();
    process_commit_locked(m, reply, acks);
  }
  return acks;
}

uint8_t* ReservationTable::rows_destination_locked(Reservation& r, const RowsMsg& m, size_t length, Acks* acks) {
  const int64_t bs = pool_.block_size();
  const bool fits = m.row >= r.resident_rows && m.rows > 0 && m.row + m.rows <= r.rows &&
                    static_cast<uint64_t>(length) == static_cast<uint64_t>(m.rows) * pool_.row_bytes();
  bool contiguous = fits;
  for (int64_t b = m.row / bs + 1; contiguous && b <= (m.row + m.rows - 1) / bs; ++b)
    contiguous = r.blocks[b] == r.blocks[b - 1] + 1;
  if (!contiguous) {
    metrics_.count_refused(TransferRefusal::kOutOfRange);
    fail_locked(r, TransferError::kInvalid,
                "rows message [" + std::to_string(m.row) + ", +" + std::to_string(m.rows) + ") of " +
                    std::to_string(length) + " bytes does not fit the reservation",
                acks);
    return nullptr;
  }
  if (r.arrived.empty()) {
    r.arrived.assign(r.rows, 0);
    std::fill(r.arrived.begin(), r.arrived.begin() + r.resident_rows, uint8_t{3});
  }
  return (m.which ? pool_.v_bytes() : pool_.k_bytes()) +
         pool_.row_offset(r.blocks, m.row) * static_cast<int64_t>(kv_dtype_bytes(pool_.kv_dtype()));
}

uint8_t* ReservationTable::rows_landing(const RowsMsg& m, size_t length, Acks& acks) {
  std::lock_guard<std::mutex> lock(mu_);
  Reservation* r = open_authorized_locked(m.reservation_id, m.secret);
  if (r == nullptr) return nullptr;
  uint8_t* dst = rows_destination_locked(*r, m, length, &acks);
  if (dst) ++r->pending_rows;
  return dst;
}

Acks ReservationTable::rows_landed(const RowsMsg& m, const void* data, size_t length) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  Reservation* r = open_authorized_locked(m.reservation_id, m.secret);
  if (r == nullptr) return acks;
  uint8_t* dst = rows_destination_locked(*r, m, length, &acks);
  if (dst == nullptr) return acks;
  std::memcpy(dst, data, length);
  for (int64_t row = m.row; row < m.row + m.rows; ++row) r->arrived[row] |= static_cast<uint8_t>(1 << m.which);
  return acks;
}

Acks ReservationTable::rows_arrived(const RowsMsg& m, std::string_view failure) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto d = draining_.find(m.reservation_id); d != draining_.end()) {
    if (--d->second.pending == 0) {
      pool_.release_blocks(d->second.blocks);
      draining_.erase(d);
    }
    return acks;
  }
  auto it = reservations_.find(m.reservation_id);
  if (it == reservations_.end() || it->second.phase != Phase::kOpen) return acks;
  Reservation& r = it->second;
  --r.pending_rows;
  if (!failure.empty()) {
    fail_locked(r, TransferError::kPeerFailed, "rows receive failed: " + std::string(failure), &acks);
  } else {
    for (int64_t row = m.row; row < m.row + m.rows; ++row) r.arrived[row] |= static_cast<uint8_t>(1 << m.which);
  }
  if (r.pending_rows > 0) return acks;
  if (r.phase == Phase::kOpen && r.deferred_commit && !r.state_pending) {
    auto [dm, reply] = std::move(*r.deferred_commit);
    r.deferred_commit.reset();
    process_commit_locked(dm, reply, acks);
  }
  return acks;
}

Acks ReservationTable::commit(const CommitMsg& m, ReplyTo reply) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  process_commit_locked(m, reply, acks);
  return acks;
}

Acks ReservationTable::abort(const AbortMsg& m) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  Reservation* r = open_authorized_locked(m.reservation_id, m.secret);
  if (r == nullptr) return acks;
  const TransferError e = m.reason == TransferError::kNone ? TransferError::kAborted : m.reason;
  fail_locked(*r, e, "sender aborted: " + m.message, &acks);
  return acks;
}

Acks ReservationTable::connection_failed(uint64_t conn, const std::string& why, int* failed) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  *failed = 0;
  for (auto& [id, r] : reservations_) {
    if (r.phase != Phase::kOpen) continue;
    if (std::find(r.writers.begin(), r.writers.end(), conn) == r.writers.end()) continue;
    fail_locked(r, TransferError::kPeerFailed, "sender endpoint failed: " + why, &acks);
    ++*failed;
  }
  return acks;
}

Acks ReservationTable::expire(Clock::time_point now) {
  Acks acks;
  std::lock_guard<std::mutex> lock(mu_);
  if (now < next_expiry_) return acks;
  auto next = Clock::time_point::max();
  for (auto& [id, r] : reservations_) {
    if (r.phase != Phase::kOpen) continue;
    if (r.deadline <= now) {
      fail_locked(r, TransferError::kLeaseExpired, "lease expired before a valid commit", &acks);
    } else {
      next = std::min(next, r.deadline);
    }
  }
  next_expiry_ = next;
  return acks;
}

// ---- verdicts ----------------------------------------------------------------------------

std::vector<uint32_t> ReservationTable::pool_row_crcs(const Reservation& r) const {
  // The sender's checksum covers the rows it put: those past the resident ones. Read from the
  // pool after everything landed (a write between landing and commit is caught too), on up to
  // verify_threads threads: nothing else overlaps this pass (bench/README.md, transfer at memcpy speed).
  std::vector<uint32_t> crcs(r.rows - r.resident_rows);
  const int64_t row_bytes = pool_.row_bytes(), elem = kv_dtype_bytes(pool_.kv_dtype());
  auto range = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t off = pool_.row_offset(r.blocks, row) * elem;
      crcs[row - r.resident_rows] =
          row_crc_bytes(pool_.k_bytes() + off, pool_.v_bytes() + off, static_cast<size_t>(row_bytes));
    }
  };
  const int64_t bytes = static_cast<int64_t>(crcs.size()) * 2 * row_bytes;
  const int threads = static_cast<int>(std::clamp<int64_t>(bytes / std::max<int64_t>(1, opt_.verify_bytes_per_thread),
                                                           1, std::max(1, opt_.verify_threads)));
  std::vector<std::thread> helpers;
  const int64_t n = static_cast<int64_t>(crcs.size());
  for (int i = 1; i < threads; ++i)
    helpers.emplace_back(range, r.resident_rows + n * i / threads, r.resident_rows + n * (i + 1) / threads);
  range(r.resident_rows, r.resident_rows + n / threads);
  for (auto& t : helpers) t.join();
  return crcs;
}

void ReservationTable::process_commit_locked(const CommitMsg& m, ReplyTo reply, Acks& acks) {
  auto it = reservations_.find(m.reservation_id);
  if (it == reservations_.end()) {  // never made, or committed and handed over: a replay at best
    metrics_.count_refused(TransferRefusal::kReplay);
    acks.push_back(
        {reply, m.reservation_id,
         transfer_error(TransferError::kUnknownReservation, "reservation " + std::to_string(m.reservation_id))});
    return;
  }
  Reservation& r = it->second;
  if (!authorized_locked(r, m.secret)) {
    acks.push_back({reply, m.reservation_id,
                    transfer_error(TransferError::kInvalid, "commit without the reservation's secret: refused")});
    return;
  }
  if (r.phase == Phase::kFailed) {
    acks.push_back({reply, m.reservation_id, r.failure});
    return;
  }
  if (r.phase == Phase::kCommitted) {
    metrics_.count_refused(TransferRefusal::kReplay);
    acks.push_back({reply, m.reservation_id,
                    transfer_error(TransferError::kAlreadyCommitted, "reservation " + std::to_string(r.id))});
    return;
  }
  auto reject = [&](TransferError e, const std::string& detail) {
    fail_locked(r, e, detail, &acks);
    acks.push_back({reply, m.reservation_id, r.failure});
  };
  if (m.fingerprint != opt_.fingerprint)
    return reject(TransferError::kFingerprintMismatch,
                  "sender model " + std::to_string(m.fingerprint) + " != " + std::to_string(opt_.fingerprint));
  if (m.request_id != r.request_id)
    return reject(TransferError::kRequestMismatch, "commit for request '" + m.request_id + "'");
  if (m.rows_written != r.rows)
    return reject(TransferError::kRowCountMismatch,
                  std::to_string(m.rows_written) + " rows written, " + std::to_string(r.rows) + " reserved");
  if (r.state_pending || r.pending_rows > 0 || (!r.has_state && m.state_bytes > 0)) {
    // Rows or the state are still on the wire (or overtaken by the commit on another lane):
    // finish when they land, or fail with the lease.
    r.deferred_commit.emplace(m, reply);
    return;
  }
  if (!r.has_state) return reject(TransferError::kMissingState, "commit before the state blob");
  if (m.state_bytes != r.state_blob.size() || m.state_crc != crc32c(r.state_blob.data(), r.state_blob.size()))
    return reject(TransferError::kBadChecksum, "state blob does not match the commit");
  if (!r.arrived.empty()) {  // pulled rows: every K and V row must have come
    for (int64_t row = 0; row < r.rows; ++row)
      if (r.arrived[row] != 3)
        return reject(TransferError::kRowsIncomplete, "row " + std::to_string(row) + " never arrived");
  }
  if (opt_.verify_rows && m.has_rows_crc && combine_row_crcs(pool_row_crcs(r)) != m.rows_crc)
    return reject(TransferError::kBadChecksum, "K/V rows checksum mismatch");
  // Everything the decode side's deserialize_state checks, so an admitted blob restores.
  auto blob = parse_state_blob(r.state_blob);
  if (!blob.ok()) return reject(TransferError::kBadState, blob.status().message());
  const StateBlobHeader& h = blob->header;
  if (Status fits = check_state_blob_model(h, opt_.fingerprint, opt_.state_shape); !fits.ok())
    return reject(TransferError::kBadState, fits.message());
  if (h.position != r.rows)
    return reject(TransferError::kBadState,
                  "state position " + std::to_string(h.position) + " != rows " + std::to_string(r.rows));
  if (h.kv_rows != 0) return reject(TransferError::kBadState, "state blob carries K/V rows (they come by RMA)");
  r.admitted_blob = std::move(r.state_blob);
  r.phase = Phase::kCommitted;
  r.state_blob.clear();
  metrics_.add_in_flight(-1);
  const double secs = std::chrono::duration<double>(Clock::now() - r.started).count();
  metrics_.observe_transfer((r.rows - r.resident_rows) * 2 * pool_.row_bytes() + static_cast<int64_t>(m.state_bytes),
                            secs);
  YOCO_HOP("transfer.commit", r.request_id, .kv("reservation", r.id).kv("rows", r.rows).kv("seconds", secs));
  acks.push_back({reply, m.reservation_id, Status::Ok()});
  cv_.notify_all();
}

void ReservationTable::fail_locked(Reservation& r, TransferError e, const std::string& detail, Acks* acks) {
  if (r.phase != Phase::kOpen) return;
  if (r.pending_rows > 0) {
    draining_[r.id] = Draining{std::move(r.blocks), r.pending_rows};
    r.blocks.clear();
    r.pending_rows = 0;
  } else {
    pool_.release_blocks(r.blocks);
    r.blocks.clear();
  }
  r.phase = Phase::kFailed;
  r.failure = transfer_error(e, "reservation " + std::to_string(r.id) + ": " + detail);
  r.state_blob.clear();
  if (r.deferred_commit && acks != nullptr) acks->push_back({r.deferred_commit->second, r.id, r.failure});
  r.deferred_commit.reset();
  metrics_.add_in_flight(-1);
  metrics_.count_failure();
  tombstones_.push_back(r.id);
  YOCO_LOG(LogLevel::kInfo, "kv reservation failed",
           LogFields()
               .kv("reservation", r.id)
               .kv("request", r.request_id)
               .kv("reason", transfer_error_name(e))
               .kv("detail", detail));
  while (tombstones_.size() > std::max<size_t>(1, opt_.max_tombstones)) {
    auto it = reservations_.find(tombstones_.front());
    if (it != reservations_.end() && it->second.phase == Phase::kFailed) reservations_.erase(it);
    tombstones_.pop_front();
  }
  cv_.notify_all();
}

}  // namespace yoco::transfer_detail
