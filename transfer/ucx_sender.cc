// Prefill side of the UCX transfer engine: the wiring. Cached endpoints per receiver address,
// the row operations, the state active message, and the commit's flush, message and ack; the
// staging buffers (transfer/staging.h) and each transfer's bookkeeping and commit phases
// (transfer/outgoing.h) carry no UCX.
// Caller threads stage data and hand commands to the progress thread; UCX completions only
// record what happened (defer), and the progress thread's tick acts on it.
#include <cstring>
#include <unordered_map>

#include "common/checksum.h"
#include "common/log.h"
#include "transfer/messages.h"
#include "transfer/outgoing.h"
#include "transfer/staging.h"
#include "transfer/ucx_transport.h"
#include "transfer/ucx_worker.h"

namespace yoco {

using namespace transfer_detail;

namespace {

using Clock = TransferClock;

// A large message goes in slices of about this many K+V bytes, each posted as soon as it is
// staged or checksummed, so the receiver copies one while this side works on the next.
constexpr int64_t kSliceBytes = int64_t{4} << 20;

class UcxKvSender final : public KvSender {
 public:
  explicit UcxKvSender(const UcxSenderOptions& opt) : opt_(opt) {}
  ~UcxKvSender() override;
  Status init();

  Status put_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                  const float* v_rows) override;
  Status put_rows_in_place(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                           const float* v_rows, std::shared_ptr<const void> hold) override;
  Status put_state(const ReservationDescriptor& d, std::span<const uint8_t> state_blob) override;
  Status commit(const ReservationDescriptor& d, int64_t rows_written, Clock::time_point deadline) override;
  void abort(const ReservationDescriptor& d, const std::string& reason) override;
  int64_t in_flight() const override { return metrics_.snapshot().in_flight; }
  const TransferMetrics& metrics() const override { return metrics_; }

 private:
  struct Peer {
    std::string address;
    ucp_ep_h ep = nullptr;
    bool ready = false;  // wired up: operations may be posted
    bool failed = false;
    std::unordered_map<std::string, ucp_rkey_h> rkeys;  // packed key bytes → unpacked on this ep
    // Work that waits for the endpoint to be wired up: called with OK then, or with the failure.
    std::vector<std::function<void(const Status&)>> parked;
  };
  struct Transfer : OutgoingTransfer {
    Transfer(const ReservationDescriptor& d, std::shared_ptr<Peer> p) : OutgoingTransfer(d), peer(std::move(p)) {}
    std::shared_ptr<Peer> peer;
  };

  static ucs_status_t on_ack(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  Status check_descriptor(const ReservationDescriptor& d) const;
  // put_rows for one slice: stages and checksums the rows, then posts them.
  Status stage_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                    const float* v_rows);
  // The checks every put makes; OK when the rows may go.
  Status check_put(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                   const float* v_rows);
  // Queues the operations for rows [row_begin, row_begin + n_rows), read from `k` and `v` (kept
  // alive by `keep` until the last operation reading them completes).
  void post_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const uint8_t* k, const uint8_t* v,
                 std::shared_ptr<const void> keep, std::vector<uint32_t> crcs);
  // Progress thread: runs fn once the endpoint to `address` is wired up (OK), or with the reason
  // it cannot be.
  void with_peer(const std::string& address, std::function<void(const Status&)> fn);
  // Progress thread: an asynchronous step of transfer `id` failed; commit reports it.
  void fail_async(uint64_t id, const Status& st);
  void submit(const std::string& address, uint64_t id, std::function<Status()> body);
  Status ended_status(uint64_t id) const { return ended_.status(id); }
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }
  void unpark_commit(uint64_t id, const std::shared_ptr<Waiter>& w) {
    if (auto it = parked_commits_.find(id); it != parked_commits_.end() && it->second == w) parked_commits_.erase(it);
  }

  // Progress thread only.
  bool tick();
  Result<std::shared_ptr<Peer>> peer_for(const std::string& address);
  Result<ucp_rkey_h> rkey_for(Peer& p, const std::vector<uint8_t>& packed);
  Result<Transfer*> transfer_for(const ReservationDescriptor& d, bool create);
  void send_am(Peer& p, unsigned id, std::vector<uint8_t> header, std::vector<uint8_t> data,
               std::function<void(ucs_status_t)> done);
  void send_am(Peer& p, unsigned id, std::vector<uint8_t> header, const void* data, size_t len,
               std::function<void(ucs_status_t)> done, UcxOp* op = nullptr);
  void track(uint64_t id, ucs_status_t st);
  void note_error(uint64_t id, ucs_status_t st);
  void advance(Transfer& t);
  void finish(uint64_t id, const Status& st);
  void abort_remote(const std::string& address, uint64_t id, const ReservationSecret& secret, TransferError reason,
                    const std::string& message);
  void fail_peer(ucp_ep_h ep, ucs_status_t st);
  void peer_ready(const std::shared_ptr<Peer>& p, ucs_status_t st);
  void close_peer(Peer& p, bool force);
  void remember_ended(uint64_t id, const Status& st) { ended_.remember(id, st); }
  void teardown();

  const UcxSenderOptions opt_;
  std::unique_ptr<UcxWorker> ucx_;
  TransferMetrics metrics_;

  StagingBuffers staging_{opt_.max_staging_bytes};

  // Progress thread only.
  std::unordered_map<std::string, std::shared_ptr<Peer>> peers_;
  std::unordered_map<uint64_t, Transfer> transfers_;
  EndedTransfers ended_;  // failed or aborted transfers, for late calls (read by callers too)
  std::vector<std::function<void()>> deferred_;
  // Commits waiting for their endpoint to be wired up, by reservation.
  std::unordered_map<uint64_t, std::shared_ptr<Waiter>> parked_commits_;
  std::vector<std::vector<uint8_t>> acks_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> ep_errors_;
  std::vector<void*> closing_;
  Clock::time_point next_gc_ = Clock::now();
};

Status UcxKvSender::init() {
  YOCO_ASSIGN_OR_RETURN(ucx_, UcxWorker::create(opt_.transports, "yoco-kv-sender"));
  YOCO_RETURN_IF_ERROR(ucx_->set_am_handler(kAmAck, on_ack, this));
  ucx_->start([this] { return tick(); });
  return Status::Ok();
}

UcxKvSender::~UcxKvSender() {
  if (!ucx_) return;
  auto w = std::make_shared<Waiter>();
  ucx_->post([this, w] {
    teardown();
    w->set(Status::Ok());
  });
  Status ignored;
  w->wait(Clock::now() + std::chrono::seconds(10), ignored);
  ucx_->stop();
  // Destroying the worker may complete what is still outstanding; its callbacks only queue work
  // (into deferred_, alive until the end of this body), which is dropped, freeing the staging.
  ucx_.reset();
  deferred_.clear();
}

void UcxKvSender::teardown() {
  for (auto& [id, t] : transfers_)
    if (t.waiter) t.waiter->set(transfer_error(TransferError::kShutdown, "sender stopped"));
  transfers_.clear();
  const Status down = transfer_error(TransferError::kShutdown, "sender stopped");
  for (auto& [addr, p] : peers_)
    for (auto& fn : std::exchange(p->parked, {})) fn(down);
  // An endpoint still wiring up (a peer that accepted the connection and never answered: a
  // stopped decode worker) cannot flush; with peer error handling it is closed by force.
  for (auto& [addr, p] : peers_) close_peer(*p, p->failed || (!p->ready && opt_.peer_error_handling));
  peers_.clear();
  ucx_->finish_closing(closing_, "kv sender");
}

Status UcxKvSender::check_descriptor(const ReservationDescriptor& d) const {
  if (Status st = d.validate(); !st.ok()) return transfer_error(TransferError::kInvalid, st.message());
  if (d.fingerprint != opt_.fingerprint)
    return transfer_error(TransferError::kFingerprintMismatch,
                          "reservation " + std::to_string(d.reservation_id) + " is for model " +
                              std::to_string(d.fingerprint) + ", this worker runs " + std::to_string(opt_.fingerprint));
  if (lease_over(d))
    return transfer_error(TransferError::kLeaseExpired,
                          "reservation " + std::to_string(d.reservation_id) + ": lease is over");
  return Status::Ok();
}

void UcxKvSender::with_peer(const std::string& address, std::function<void(const Status&)> fn) {
  auto peer = peer_for(address);
  if (!peer.ok()) return fn(peer.status());
  if (!(*peer)->ready) return (*peer)->parked.push_back(std::move(fn));
  fn(Status::Ok());
}

void UcxKvSender::fail_async(uint64_t id, const Status& st) {
  if (transfers_.count(id)) return finish(id, st);
  metrics_.count_failure();
  remember_ended(id, st);
}

// ---- API ---------------------------------------------------------------------------------

Status UcxKvSender::check_put(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                              const float* v_rows) {
  if (n_rows <= 0 || row_begin < d.resident_rows || row_begin + n_rows > d.rows || !k_rows || !v_rows)
    return transfer_error(TransferError::kInvalid,
                          "put_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + n_rows) +
                              ") outside the reservation's " + std::to_string(d.rows) + " rows");
  YOCO_RETURN_IF_ERROR(ended_status(d.reservation_id));
  if (Status st = check_descriptor(d); !st.ok()) {
    if (transfer_error_of(st) == TransferError::kFingerprintMismatch)
      ucx_->post([this, addr = d.address, id = d.reservation_id, secret = d.secret, msg = st.message()] {
        abort_remote(addr, id, secret, TransferError::kFingerprintMismatch, msg);
      });
    return st;
  }
  return Status::Ok();
}

Status UcxKvSender::put_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                             const float* v_rows) {
  YOCO_RETURN_IF_ERROR(check_put(d, row_begin, n_rows, k_rows, v_rows));
  const int slice = static_cast<int>(std::max<int64_t>(1, kSliceBytes / (2 * d.row_bytes())));
  for (int first = 0; first < n_rows; first += slice) {
    const int64_t at = static_cast<int64_t>(first) * d.kv_dim;
    YOCO_RETURN_IF_ERROR(stage_rows(d, row_begin + first, std::min(slice, n_rows - first), k_rows + at, v_rows + at));
  }
  return Status::Ok();
}

Status UcxKvSender::stage_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k_rows,
                               const float* v_rows) {
  const int kv_dim = d.kv_dim;
  const int64_t n = static_cast<int64_t>(n_rows) * kv_dim;
  YOCO_ASSIGN_OR_RETURN(auto staging, staging_.acquire(n_rows * kv_row_bytes(kv_dim, d.kv_dtype), opt_.op_timeout));
  std::vector<uint32_t> crcs(n_rows);
  if (d.kv_dtype != KvDType::kF32) {
    // A 16-bit pool (docs/design.md, 16-bit K/V): rows rounded to it here, as the pool would
    // round them, and checksummed as they will lie there.
    const size_t row_bytes = static_cast<size_t>(d.row_bytes());
    auto* base = reinterpret_cast<uint8_t*>(staging->data());
    for (int i = 0; i < n_rows; ++i) {
      const int64_t off = static_cast<int64_t>(i) * kv_dim;
      uint8_t* k_dst = base + i * row_bytes;
      uint8_t* v_dst = base + n_rows * row_bytes + i * row_bytes;
      encode_kv_values(k_rows + off, kv_dim, d.kv_dtype, k_dst);
      encode_kv_values(v_rows + off, kv_dim, d.kv_dtype, v_dst);
      if (opt_.row_checksums) crcs[i] = row_crc_bytes(k_dst, v_dst, row_bytes);
    }
    post_rows(d, row_begin, n_rows, base, base + n_rows * row_bytes, std::move(staging), std::move(crcs));
    return Status::Ok();
  }
  if (opt_.row_checksums) {
    // Copy and checksum row by row, so the checksum reads the staged row from L1 instead of a
    // second pass over the whole message (bench/README.md, transfer at memcpy speed).
    for (int i = 0; i < n_rows; ++i) {
      const int64_t off = static_cast<int64_t>(i) * kv_dim;
      float* k_dst = staging->data() + off;
      float* v_dst = staging->data() + n + off;
      std::memcpy(k_dst, k_rows + off, static_cast<size_t>(kv_dim) * 4);
      std::memcpy(v_dst, v_rows + off, static_cast<size_t>(kv_dim) * 4);
      crcs[i] = row_crc(k_dst, v_dst, kv_dim);
    }
  } else {
    std::memcpy(staging->data(), k_rows, n * 4);
    std::memcpy(staging->data() + n, v_rows, n * 4);
  }
  const float* k = staging->data();
  post_rows(d, row_begin, n_rows, reinterpret_cast<const uint8_t*>(k), reinterpret_cast<const uint8_t*>(k + n),
            std::move(staging), std::move(crcs));
  return Status::Ok();
}

Status UcxKvSender::put_rows_in_place(const ReservationDescriptor& d, int64_t row_begin, int n_rows,
                                      const float* k_rows, const float* v_rows, std::shared_ptr<const void> hold) {
  // A 16-bit pool takes converted rows: staged (put_rows converts while it copies).
  if (d.kv_dtype != KvDType::kF32) return put_rows(d, row_begin, n_rows, k_rows, v_rows);
  YOCO_RETURN_IF_ERROR(check_put(d, row_begin, n_rows, k_rows, v_rows));
  // No copy: the checksum is the one pass over the rows on this side; UCX reads them from here.
  const int slice = static_cast<int>(std::max<int64_t>(1, kSliceBytes / (2 * d.row_bytes())));
  for (int first = 0; first < n_rows; first += slice) {
    const int n = std::min(slice, n_rows - first);
    const int64_t at = static_cast<int64_t>(first) * d.kv_dim;
    std::vector<uint32_t> crcs(n);
    if (opt_.row_checksums)
      for (int i = 0; i < n; ++i) {
        const int64_t off = at + static_cast<int64_t>(i) * d.kv_dim;
        crcs[i] = row_crc(k_rows + off, v_rows + off, d.kv_dim);
      }
    post_rows(d, row_begin + first, n, reinterpret_cast<const uint8_t*>(k_rows + at),
              reinterpret_cast<const uint8_t*>(v_rows + at), hold, std::move(crcs));
  }
  return Status::Ok();
}

void UcxKvSender::post_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const uint8_t* k,
                            const uint8_t* v, std::shared_ptr<const void> keep, std::vector<uint32_t> crcs) {
  auto runs = d.contiguous_runs(row_begin, n_rows);
  // Handed to the progress thread without waiting (a thread hand-off per chunk would cost more
  // than a small put); a failure is kept for the next call and for commit. Every operation's
  // completion holds `keep`, so the rows outlive whatever reads them.
  auto body = [this, d, row_begin, n_rows, k, v, keep = std::move(keep), crcs = std::move(crcs),
               runs = std::move(runs)]() -> Status {
    YOCO_ASSIGN_OR_RETURN(Transfer * t, transfer_for(d, true));
    const bool push = opt_.row_path == UcxRowPath::kPush;
    ucp_rkey_h rkeys[2] = {nullptr, nullptr};
    if (push) {
      if (d.k_rkey.empty())
        return transfer_error(
            TransferError::kInvalid,
            "the receiver takes no one-sided writes (its descriptor has no rkeys): use the pull row path");
      YOCO_ASSIGN_OR_RETURN(rkeys[0], rkey_for(*t->peer, d.k_rkey));
      YOCO_ASSIGN_OR_RETURN(rkeys[1], rkey_for(*t->peer, d.v_rkey));
    }
    const int64_t row_bytes = d.row_bytes();
    const uint64_t id = t->id;
    for (const RowRun& r : runs) {
      for (int which = 0; which < 2; ++which) {
        const uint8_t* src = (which ? v : k) + (r.row - row_begin) * row_bytes;
        const size_t len = static_cast<size_t>(r.rows * row_bytes);
        auto done = [this, id, keep](ucs_status_t st) { defer([this, id, st] { track(id, st); }); };
        ++t->outstanding;
        if (!push) {  // one message per contiguous run; the receiver fetches it into the blocks
          send_am(*t->peer, kAmRows, encode(RowsMsg{id, t->secret, static_cast<uint8_t>(which), r.row, r.rows}), src,
                  len, std::move(done));
          continue;
        }
        auto* op = new UcxOp;
        op->on_done = std::move(done);
        ucp_request_param_t p;
        ucx_op_param(p, op);
        const uint64_t remote = (which ? d.v_base : d.k_base) + r.offset;
        ucx_op_posted(ucp_put_nbx(t->peer->ep, src, len, remote, rkeys[which], &p), op);
      }
    }
    t->rows_put(row_begin, crcs, d.kv_dim, d.kv_dtype);
    return Status::Ok();
  };
  submit(d.address, d.reservation_id, std::move(body));
}

Status UcxKvSender::put_state(const ReservationDescriptor& d, std::span<const uint8_t> state_blob) {
  if (state_blob.empty()) return transfer_error(TransferError::kInvalid, "put_state: empty state blob");
  YOCO_RETURN_IF_ERROR(ended_status(d.reservation_id));
  YOCO_RETURN_IF_ERROR(check_descriptor(d));
  std::vector<uint8_t> blob(state_blob.begin(), state_blob.end());
  const uint32_t crc = crc32c(blob.data(), blob.size());
  auto body = [this, d, crc, blob = std::move(blob)]() mutable -> Status {
    YOCO_ASSIGN_OR_RETURN(Transfer * t, transfer_for(d, true));
    if (t->has_state) return transfer_error(TransferError::kInvalid, "put_state: state already sent");
    t->has_state = true;
    t->state_bytes = blob.size();
    t->state_crc = crc;
    t->bytes += static_cast<int64_t>(blob.size());
    ++t->outstanding;
    const uint64_t id = t->id;
    auto header = encode(StateMsg{id, t->secret, blob.size(), crc});  // before the blob moves
    send_am(*t->peer, kAmState, std::move(header), std::move(blob),
            [this, id](ucs_status_t st) { defer([this, id, st] { track(id, st); }); });
    return Status::Ok();
  };
  submit(d.address, d.reservation_id, std::move(body));
  return Status::Ok();
}

void UcxKvSender::submit(const std::string& address, uint64_t id, std::function<Status()> body) {
  ucx_->post([this, address, id, body = std::move(body)]() mutable {
    with_peer(address, [this, id, body = std::move(body)](const Status& peer) mutable {
      const Status st = peer.ok() ? body() : peer;
      if (!st.ok()) fail_async(id, st);
    });
  });
}

Status UcxKvSender::commit(const ReservationDescriptor& d, int64_t rows_written, Clock::time_point deadline) {
  auto w = std::make_shared<Waiter>();
  const uint64_t id = d.reservation_id;
  ucx_->post([this, w, id, rows_written, request_id = d.request_id, address = d.address] {
    // Aborted already (the job was cancelled while its committer was on its way here).
    if (Status e = ended_status(id); !e.ok()) return w->set(e);
    // Behind any puts still waiting for the endpoint, which a hung receiver never wires up: until
    // then an abort answers the commit (parked_commits_).
    parked_commits_[id] = w;
    with_peer(address, [this, w, id, rows_written, request_id](const Status& peer) {
      unpark_commit(id, w);
      if (w->abandoned) return;  // timed out while waiting for the endpoint: never commit late
      if (Status e = ended_status(id); !e.ok()) return w->set(e);
      if (!peer.ok()) return w->set(peer);
      auto it = transfers_.find(id);
      if (it == transfers_.end())
        return w->set(
            transfer_error(TransferError::kRowsIncomplete, "reservation " + std::to_string(id) + ": nothing was put"));
      Transfer& t = it->second;
      if (t.phase != CommitPhase::kNone)
        return w->set(transfer_error(TransferError::kInvalid, "commit already in progress"));
      if (!t.error.ok()) {
        t.waiter = w;
        return finish(id, Status(t.error));
      }
      if (Status st = t.begin_commit(rows_written, request_id, opt_.fingerprint, opt_.row_checksums); !st.ok())
        return w->set(st);
      t.waiter = w;
      advance(t);
    });
  });
  Status st;
  if (w->wait(deadline, st)) return st;
  w->abandoned = true;
  // Nobody waits any more: drop the transfer and tell the receiver, so its blocks come back now.
  ucx_->post([this, id, w] {
    unpark_commit(id, w);
    auto it = transfers_.find(id);
    if (it == transfers_.end() || it->second.waiter != w) return;
    const std::string address = it->second.peer->address;
    const ReservationSecret secret = it->second.secret;
    finish(id, transfer_error(TransferError::kTimeout, "commit deadline passed"));
    abort_remote(address, id, secret, TransferError::kTimeout, "sender's commit deadline passed");
  });
  return transfer_error(TransferError::kTimeout,
                        "reservation " + std::to_string(id) + ": no commit acknowledgement by the deadline");
}

void UcxKvSender::abort(const ReservationDescriptor& d, const std::string& reason) {
  ucx_->post([this, address = d.address, id = d.reservation_id, secret = d.secret, reason] {
    const Status st =
        transfer_error(TransferError::kAborted, "reservation " + std::to_string(id) + " was aborted: " + reason);
    if (transfers_.count(id)) finish(id, st);
    if (auto it = parked_commits_.find(id); it != parked_commits_.end()) {
      it->second->set(st);
      parked_commits_.erase(it);
    }
    remember_ended(id, st);
    abort_remote(address, id, secret, TransferError::kAborted, reason);
  });
}

// ---- progress thread -----------------------------------------------------------------------

ucs_status_t UcxKvSender::on_ack(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t*) {
  const auto* h = static_cast<const uint8_t*>(header);
  static_cast<UcxKvSender*>(arg)->acks_.emplace_back(h, h + header_length);
  return UCS_OK;
}

void UcxKvSender::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<UcxKvSender*>(arg)->ep_errors_.emplace_back(ep, status);
}

bool UcxKvSender::tick() {
  const bool work = !deferred_.empty() || !acks_.empty() || !ep_errors_.empty();
  for (auto& fn : std::exchange(deferred_, {})) fn();
  for (auto& a : std::exchange(acks_, {})) {
    auto m = decode_ack(a);
    if (!m.ok()) {
      YOCO_LOG(LogLevel::kWarn, "kv sender: bad acknowledgement", LogFields().kv("error", m.status().message()));
      continue;
    }
    auto it = transfers_.find(m->reservation_id);
    if (it == transfers_.end() || it->second.phase != CommitPhase::kAwaitAck) continue;
    if (m->reason == TransferError::kNone) {
      finish(m->reservation_id, Status::Ok());
    } else {
      const Status tag = transfer_error(m->reason, "");
      finish(m->reservation_id,
             Status(tag.code(), m->message.rfind('[', 0) == 0 ? m->message : tag.message() + m->message));
    }
  }
  for (auto& [ep, st] : std::exchange(ep_errors_, {})) fail_peer(ep, st);
  reap_requests(closing_);
  // Transfers nobody committed or aborted are dropped some time after their lease.
  if (Clock::now() >= next_gc_) {
    next_gc_ = Clock::now() + std::chrono::seconds(1);
    const int64_t now = lease_deadline_unix_ms(Clock::now());
    std::vector<uint64_t> stale;
    for (auto& [id, t] : transfers_)
      if (t.stale(now, 10000)) stale.push_back(id);
    for (uint64_t id : stale) finish(id, transfer_error(TransferError::kLeaseExpired, "never committed"));
  }
  return work || !deferred_.empty();
}

Result<std::shared_ptr<UcxKvSender::Peer>> UcxKvSender::peer_for(const std::string& address) {
  auto it = peers_.find(address);
  if (it != peers_.end() && !it->second->failed) return it->second;
  // A failed endpoint is replaced on the next use: one bad transfer never marks a peer dead for good.
  YOCO_ASSIGN_OR_RETURN(auto hp, split_host_port(address));
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (Status st = resolve_sockaddr(hp.first, hp.second, ss, len); !st.ok())
    return transfer_error(TransferError::kPeerFailed, st.message());
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
  ep.sockaddr.addrlen = len;
  ep.err_mode = opt_.peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = this;
  auto p = std::make_shared<Peer>();
  p->address = address;
  const ucs_status_t st = ucp_ep_create(ucx_->worker(), &ep, &p->ep);
  if (st != UCS_OK)
    return transfer_error(TransferError::kPeerFailed, "connect to " + address + ": " + ucs_status_string(st));
  peers_[address] = p;
  // Nothing is posted before the wire-up completes: UCX 1.13 can abort when it replays an active
  // message queued on the temporary wire-up lane onto a shared-memory lane ("max_iov > 1"). A
  // flush completes only on the final lanes.
  auto* op = new UcxOp;
  op->on_done = [this, p](ucs_status_t st) { defer([this, p, st] { peer_ready(p, st); }); };
  ucp_request_param_t param;
  ucx_op_param(param, op);
  ucx_op_posted(ucp_ep_flush_nbx(p->ep, &param), op);
  return p;
}

Result<ucp_rkey_h> UcxKvSender::rkey_for(Peer& p, const std::vector<uint8_t>& packed) {
  std::string key(packed.begin(), packed.end());
  auto it = p.rkeys.find(key);
  if (it != p.rkeys.end()) return it->second;
  if (p.rkeys.size() >= 64) {  // a receiver restarted many times: start over
    for (auto& [k, r] : p.rkeys) ucp_rkey_destroy(r);
    p.rkeys.clear();
  }
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t st = ucp_ep_rkey_unpack(p.ep, packed.data(), &rkey);
  if (st != UCS_OK)
    return transfer_error(TransferError::kInvalid, std::string("remote key does not unpack: ") + ucs_status_string(st));
  p.rkeys.emplace(std::move(key), rkey);
  return rkey;
}

Result<UcxKvSender::Transfer*> UcxKvSender::transfer_for(const ReservationDescriptor& d, bool create) {
  const uint64_t id = d.reservation_id;
  YOCO_RETURN_IF_ERROR(ended_status(id));
  auto it = transfers_.find(id);
  if (it != transfers_.end()) {
    Transfer& t = it->second;
    if (!t.error.ok()) return t.error;
    if (t.phase != CommitPhase::kNone)
      return transfer_error(TransferError::kInvalid, "reservation " + std::to_string(id) + " is committing");
    return &t;
  }
  if (!create) return transfer_error(TransferError::kUnknownReservation, "reservation " + std::to_string(id));
  YOCO_ASSIGN_OR_RETURN(auto peer, peer_for(d.address));
  Transfer& t = transfers_.try_emplace(id, d, peer).first->second;
  metrics_.add_in_flight(1);
  send_am(*peer, kAmBegin, encode(BeginMsg{id, t.secret, opt_.fingerprint}), {}, [this, id](ucs_status_t st) {
    if (st != UCS_OK) defer([this, id, st] { note_error(id, st); });
  });
  return &t;
}

void UcxKvSender::send_am(Peer& p, unsigned id, std::vector<uint8_t> header, std::vector<uint8_t> data,
                          std::function<void(ucs_status_t)> done) {
  auto* op = new UcxOp;
  op->data = std::move(data);
  send_am(p, id, std::move(header), op->data.empty() ? nullptr : op->data.data(), op->data.size(), std::move(done), op);
}

void UcxKvSender::send_am(Peer& p, unsigned id, std::vector<uint8_t> header, const void* data, size_t len,
                          std::function<void(ucs_status_t)> done, UcxOp* op) {
  if (op == nullptr) op = new UcxOp;
  op->header = std::move(header);
  op->on_done = std::move(done);  // holds whatever keeps `data` alive
  ucp_request_param_t param;
  ucx_op_param(param, op);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY;  // the receiver learns which endpoint writes the reservation
  ucx_op_posted(ucp_am_send_nbx(p.ep, id, op->header.data(), op->header.size(), data, len, &param), op);
}

// A tracked operation (put, state) of transfer `id` completed.
void UcxKvSender::track(uint64_t id, ucs_status_t st) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;
  if (it->second.outstanding > 0) --it->second.outstanding;
  note_error(id, st);
}

void UcxKvSender::note_error(uint64_t id, ucs_status_t st) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;
  Transfer& t = it->second;
  if (st != UCS_OK && t.error.ok())
    t.error = transfer_error(TransferError::kPeerFailed,
                             std::string("transfer to ") + t.peer->address + " failed: " + ucs_status_string(st));
  advance(t);
}

void UcxKvSender::advance(Transfer& t) {
  const auto step = t.advance();
  if (step == OutgoingTransfer::Step::kFail) return finish(t.id, t.error);
  if (step != OutgoingTransfer::Step::kFlush) return;
  // Every put and the state completed locally; the flush makes them complete at the target
  // before the commit is sent.
  const uint64_t id = t.id;
  auto* op = new UcxOp;
  op->on_done = [this, id](ucs_status_t st) {
    defer([this, id, st] {
      auto it = transfers_.find(id);
      if (it == transfers_.end() || it->second.phase != CommitPhase::kFlushing) return;
      Transfer& t = it->second;
      if (st != UCS_OK)
        return finish(
            id, transfer_error(TransferError::kPeerFailed, std::string("flush failed: ") + ucs_status_string(st)));
      t.phase = CommitPhase::kAwaitAck;
      send_am(*t.peer, kAmCommit, encode(t.commit), {}, [this, id](ucs_status_t st) {
        if (st != UCS_OK)
          defer([this, id, st] {
            finish(id, transfer_error(TransferError::kPeerFailed,
                                      std::string("commit send failed: ") + ucs_status_string(st)));
          });
      });
    });
  };
  ucp_request_param_t p;
  ucx_op_param(p, op);
  ucx_op_posted(ucp_ep_flush_nbx(t.peer->ep, &p), op);
}

void UcxKvSender::finish(uint64_t id, const Status& st) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;
  Transfer& t = it->second;
  if (st.ok()) {
    metrics_.observe_transfer(t.bytes, std::chrono::duration<double>(Clock::now() - t.started).count());
  } else {
    metrics_.count_failure();
    remember_ended(id, st);
    YOCO_LOG(LogLevel::kInfo, "kv transfer failed", LogFields().kv("reservation", id).kv("error", st.message()));
  }
  metrics_.add_in_flight(-1);  // before the waiter wakes: a caller sees the counters settled
  if (t.waiter) t.waiter->set(st);
  transfers_.erase(it);
}

void UcxKvSender::abort_remote(const std::string& address, uint64_t id, const ReservationSecret& secret,
                               TransferError reason, const std::string& message) {
  auto peer = peer_for(address);
  if (!peer.ok()) return;  // unreachable: the receiver's lease or peer check frees the blocks
  std::shared_ptr<Peer> p = *peer;
  if (!p->ready) {
    p->parked.push_back([=, this](const Status& st) {
      if (st.ok()) abort_remote(address, id, secret, reason, message);
    });
    return;
  }
  // Flush first so no put of this transfer lands after the receiver has freed the blocks.
  auto* op = new UcxOp;
  op->on_done = [this, p, id, secret, reason, message](ucs_status_t st) {
    if (st != UCS_OK) return;
    defer([this, p, id, secret, reason, message] {
      if (!p->failed && p->ep)
        send_am(*p, kAmAbort, encode(AbortMsg{id, secret, reason, message}), {}, [](ucs_status_t) {});
    });
  };
  ucp_request_param_t param;
  ucx_op_param(param, op);
  ucx_op_posted(ucp_ep_flush_nbx(p->ep, &param), op);
}

void UcxKvSender::peer_ready(const std::shared_ptr<Peer>& p, ucs_status_t st) {
  if (st == UCS_OK && !p->failed) {
    p->ready = true;
    for (auto& fn : std::exchange(p->parked, {})) fn(Status::Ok());
    return;
  }
  if (!p->failed) fail_peer(p->ep, st);
}

void UcxKvSender::fail_peer(ucp_ep_h ep, ucs_status_t st) {
  std::shared_ptr<Peer> p;
  for (auto& [addr, peer] : peers_)
    if (peer->ep == ep) p = peer;
  if (!p || p->failed) return;
  p->failed = true;
  YOCO_LOG(LogLevel::kWarn, "kv sender: endpoint failed",
           LogFields().kv("peer", p->address).kv("status", ucs_status_string(st)));
  const Status err = transfer_error(TransferError::kPeerFailed, p->address + ": " + ucs_status_string(st));
  for (auto& fn : std::exchange(p->parked, {})) fn(err);
  // Its transfers end now (their puts may be lost); later calls for them get this error, and
  // the next transfer to the address connects afresh.
  std::vector<uint64_t> ended;
  for (auto& [id, t] : transfers_)
    if (t.peer == p) ended.push_back(id);
  for (uint64_t id : ended) finish(id, err);
  close_peer(*p, true);
  if (auto it = peers_.find(p->address); it != peers_.end() && it->second == p) peers_.erase(it);
}

void UcxKvSender::close_peer(Peer& p, bool force) {
  for (auto& [k, r] : p.rkeys) ucp_rkey_destroy(r);
  p.rkeys.clear();
  if (!p.ep) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(p.ep, &param);
  if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
  p.ep = nullptr;
  p.failed = true;
}

}  // namespace

Result<std::unique_ptr<KvSender>> make_ucx_sender(const UcxSenderOptions& options) {
  auto s = std::make_unique<UcxKvSender>(options);
  YOCO_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<KvSender>(std::move(s));
}

}  // namespace yoco
