// Decode side of the UCX transfer engine: pool registration, listener, reservations with leases,
// commit validation. UCX callbacks only queue what arrived; the progress thread's tick handles
// it outside any callback, under mu_ where reservations are touched.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/checksum.h"
#include "common/log.h"
#include "transfer/messages.h"
#include "transfer/ucx_transport.h"
#include "transfer/ucx_worker.h"

namespace yoco {

using namespace transfer_detail;

namespace {

using Clock = TransferClock;

class UcxKvReceiver final : public KvReceiver {
 public:
  UcxKvReceiver(KvBlockPool& pool, const UcxReceiverOptions& opt)
      : pool_(pool), fingerprint_(opt.fingerprint), opt_(opt) {}
  ~UcxKvReceiver() override;

  Status init();

  const std::string& address() const override { return address_; }
  Result<ReservationDescriptor> reserve(const std::string& request_id, int64_t rows,
                                        Clock::time_point lease_deadline) override {
    return reserve_over(request_id, rows, lease_deadline, {});
  }
  Result<ReservationDescriptor> reserve_over(const std::string& request_id, int64_t rows,
                                             Clock::time_point lease_deadline, std::vector<int32_t> resident) override;
  Result<CommittedSequence> wait_committed(uint64_t reservation_id, Clock::time_point deadline) override;
  void cancel(uint64_t reservation_id) override;
  int64_t in_flight() const override { return metrics_.snapshot().in_flight; }
  const TransferMetrics& metrics() const override { return metrics_; }

 private:
  enum class Phase { kOpen, kCommitted, kFailed };
  struct Reservation {
    uint64_t id = 0;
    std::string request_id;
    int64_t rows = 0;
    int64_t resident_rows = 0;    // leading rows already in place (never written by the sender)
    std::vector<int32_t> blocks;  // the reserved pool blocks, in row order
    Clock::time_point deadline, started;
    Phase phase = Phase::kOpen;
    std::vector<uint64_t> writers;  // connections that sent kBegin or kState for it
    bool state_pending = false, has_state = false;
    // Pull path: rows that arrived (bit 0 K, bit 1 V) and receives still writing into the blocks.
    std::vector<uint8_t> arrived;
    int pending_rows = 0;
    std::vector<uint8_t> state_blob;
    std::optional<std::pair<CommitMsg, ucp_ep_h>> deferred_commit;  // waits for the state data
    Status failure;
    std::vector<uint8_t> admitted_blob;  // the validated state blob, once committed
    ReservationSecret secret{};          // minted here; every message for it must carry it
  };
  // What a UCX callback saw, handled later by tick().
  struct Inbound {
    unsigned id = 0;
    std::vector<uint8_t> header, data;
    ucp_ep_h reply_ep = nullptr;
    void* rndv_desc = nullptr;  // kState over rendezvous: fetch with ucp_am_recv_data_nbx
    size_t length = 0;
  };
  struct RowsRecv {
    UcxKvReceiver* self;
    RowsMsg msg;
  };
  struct StateRecv {
    UcxKvReceiver* self;
    uint64_t reservation_id;
    StateMsg msg;
    std::vector<uint8_t> buf;
  };

  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param);
  static void on_conn_request(ucp_conn_request_h req, void* arg);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_state_data(void* request, ucs_status_t status, size_t length, void* user_data);
  static void on_rows_data(void* request, ucs_status_t status, size_t length, void* user_data);

  bool tick();
  void accept(ucp_conn_request_h req);
  void drop_connection(ucp_ep_h ep, ucs_status_t status);
  void handle(Inbound& in);
  void handle_state(Inbound& in, uint64_t conn);
  void handle_rows(Inbound& in);
  // Where rows of `m` go in the pool, or null when they are not one contiguous run of the
  // reservation (the receiver never trusts the sender's idea of its memory). Under mu_.
  float* rows_destination_locked(Reservation& r, const RowsMsg& m, size_t length);
  void rows_arrived(const RowsMsg& m, ucs_status_t status);
  void state_arrived(uint64_t reservation_id, const StateMsg& msg, std::vector<uint8_t> blob, ucs_status_t status);
  // Validates and admits, or rejects; sends the acknowledgement. Under mu_.
  void process_commit_locked(const CommitMsg& m, ucp_ep_h reply_ep);
  // The per-row checksums of the reservation's rows past the resident ones, read from the pool.
  std::vector<uint32_t> pool_row_crcs(const Reservation& r) const;
  void fail_locked(Reservation& r, TransferError e, const std::string& detail);
  // True when `secret` is the reservation's; else counts the refusal. A message without it
  // changes nothing (it cannot fail the reservation either: that would let anyone cancel it).
  bool authorized_locked(const Reservation& r, const ReservationSecret& secret);
  // Queues the acknowledgement; tick() sends it (never from inside a UCX callback).
  void send_ack(ucp_ep_h ep, uint64_t reservation_id, const Status& st);
  void flush_acks();
  void close_ep(ucp_ep_h ep);
  uint64_t conn_of(ucp_ep_h ep) const;
  void expire_leases();
  void teardown();

  KvBlockPool& pool_;
  const uint64_t fingerprint_;
  const UcxReceiverOptions opt_;
  std::unique_ptr<UcxWorker> ucx_;
  ucp_listener_h listener_ = nullptr;
  ucp_mem_h k_memh_ = nullptr, v_memh_ = nullptr;
  std::vector<uint8_t> k_rkey_, v_rkey_;
  std::string address_;
  TransferMetrics metrics_;

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
  Clock::time_point next_expiry_ = Clock::time_point::max();
  uint64_t id_seed_ = 0, id_counter_ = 0;

  // Progress thread only.
  std::vector<Inbound> inbox_;
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> ep_errors_;
  std::vector<std::pair<StateRecv*, ucs_status_t>> state_done_;
  std::vector<std::pair<RowsRecv*, ucs_status_t>> rows_done_;
  struct PendingAck {
    ucp_ep_h ep;
    uint64_t reservation_id;
    Status status;
  };
  std::vector<PendingAck> acks_out_;
  std::unordered_map<ucp_ep_h, uint64_t> conns_;
  uint64_t next_conn_ = 1;
  std::vector<void*> closing_;
};

Status ucx_error(const char* what, ucs_status_t st) {
  return Status(StatusCode::kUnavailable, std::string(what) + ": " + ucs_status_string(st));
}

int64_t unix_ms(Clock::time_point t) {
  const auto sys = std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(t - Clock::now());
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

Status UcxKvReceiver::init() {
  if (static_cast<uint32_t>(pool_.row_floats()) != opt_.state_shape.kv_dim)
    return invalid_argument("kv receiver: pool kv_dim " + std::to_string(pool_.row_floats()) + " != model kv_dim " +
                            std::to_string(opt_.state_shape.kv_dim));
  if (opt_.max_rows <= 0) return invalid_argument("kv receiver: max_rows must be > 0");
  YOCO_ASSIGN_OR_RETURN(ucx_, UcxWorker::create(opt_.transports, "yoco-kv-receiver", opt_.allow_push));
  std::random_device rd;
  id_seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());

  // Register the pool once (pulled rows are received straight into it); senders write into it
  // with the packed keys only when pushes are allowed.
  for (int which = 0; which < 2; ++which) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = which == 0 ? pool_.k_base() : pool_.v_base();
    mp.length = static_cast<size_t>(pool_.bytes() / 2);
    ucp_mem_h& memh = which == 0 ? k_memh_ : v_memh_;
    ucs_status_t st = ucp_mem_map(ucx_->context(), &mp, &memh);
    if (st != UCS_OK) return ucx_error("ucp_mem_map", st);
    if (!opt_.allow_push) continue;
    void* buf = nullptr;
    size_t size = 0;
    st = ucp_rkey_pack(ucx_->context(), memh, &buf, &size);
    if (st != UCS_OK) return ucx_error("ucp_rkey_pack", st);
    auto* b = static_cast<uint8_t*>(buf);
    (which == 0 ? k_rkey_ : v_rkey_).assign(b, b + size);
    ucp_rkey_buffer_release(buf);
  }

  for (unsigned id : {kAmBegin, kAmState, kAmCommit, kAmAbort, kAmRows})
    YOCO_RETURN_IF_ERROR(ucx_->set_am_handler(id, on_am, this));

  sockaddr_storage ss{};
  socklen_t len = 0;
  YOCO_RETURN_IF_ERROR(resolve_sockaddr(opt_.listen_host, opt_.listen_port == 0 ? 1 : opt_.listen_port, ss, len));
  if (opt_.listen_port == 0) {  // resolve wants a port; the listener gets "any"
    if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = 0;
    else reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = 0;
  }
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
  lp.sockaddr.addrlen = len;
  lp.conn_handler.cb = on_conn_request;
  lp.conn_handler.arg = this;
  ucs_status_t st = ucp_listener_create(ucx_->worker(), &lp, &listener_);
  if (st != UCS_OK) return ucx_error(("ucp_listener_create on " + opt_.listen_host).c_str(), st);
  ucp_listener_attr_t la{};
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(listener_, &la);
  if (st != UCS_OK) return ucx_error("ucp_listener_query", st);
  const int port = la.sockaddr.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port)
                                                    : ntohs(reinterpret_cast<sockaddr_in6*>(&la.sockaddr)->sin6_port);
  std::string host = opt_.advertise_host;
  if (host.empty()) {
    host = opt_.listen_host;
    if (host == "0.0.0.0" || host == "::") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
  }
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);

  ucx_->start([this] { return tick(); });
  YOCO_LOG(LogLevel::kInfo, "kv receiver listening",
           LogFields().kv("address", address_).kv("pool_blocks", pool_.total_blocks()));
  return Status::Ok();
}

UcxKvReceiver::~UcxKvReceiver() {
  if (ucx_) {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    ucx_->post([&] {
      teardown();
      std::lock_guard<std::mutex> lock(m);
      done = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
    }
    ucx_->stop();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, r] : reservations_) {
      if (r.phase == Phase::kOpen) fail_locked(r, TransferError::kShutdown, "receiver stopped");
      if (r.phase == Phase::kCommitted) pool_.release_blocks(r.blocks);  // admitted but never claimed
    }
    reservations_.clear();
    for (auto& [id, d] : draining_) pool_.release_blocks(d.blocks);  // the worker no longer progresses
    draining_.clear();
    cv_.notify_all();
  }
  if (ucx_) {
    if (k_memh_) ucp_mem_unmap(ucx_->context(), k_memh_);
    if (v_memh_) ucp_mem_unmap(ucx_->context(), v_memh_);
    // Destroying the worker may complete receives still outstanding; their callbacks only queue.
    ucx_.reset();
  }
  for (auto& [rr, st] : rows_done_) delete rr;
  for (auto& [sr, st] : state_done_) delete sr;
}

void UcxKvReceiver::teardown() {
  if (listener_) ucp_listener_destroy(listener_);
  listener_ = nullptr;
  for (auto& [ep, id] : conns_) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
  }
  conns_.clear();
  ucx_->progress_until([&] { return reap_requests(closing_); }, Clock::now() + std::chrono::seconds(2));
}

// ---- callbacks: record and return --------------------------------------------------------

ucs_status_t UcxKvReceiver::on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                  const ucp_am_recv_param_t* param) {
  // The id is not passed to the callback; it is the first byte after the magic of the header.
  auto* self = static_cast<UcxKvReceiver*>(arg);
  Inbound in;
  const auto* h = static_cast<const uint8_t*>(header);
  in.header.assign(h, h + header_length);
  in.id = header_length >= 5 ? h[4] : 0;
  in.reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  in.length = length;
  ucs_status_t ret = UCS_OK;
  if (in.id == kAmRows && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    // Eager rows: straight into the pool, here (the data does not outlive the callback).
    auto m = decode_rows(in.header);
    if (!m.ok()) return UCS_OK;
    std::lock_guard<std::mutex> lock(self->mu_);
    auto it = self->reservations_.find(m->reservation_id);
    if (it == self->reservations_.end() || it->second.phase != Phase::kOpen) return UCS_OK;
    if (!self->authorized_locked(it->second, m->secret)) return UCS_OK;
    float* dst = self->rows_destination_locked(it->second, *m, length);
    if (dst == nullptr) return UCS_OK;
    std::memcpy(dst, data, length);
    for (int64_t r = m->row; r < m->row + m->rows; ++r) it->second.arrived[r] |= static_cast<uint8_t>(1 << m->which);
    return UCS_OK;
  }
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    if (in.id == kAmRows || (in.id == kAmState && static_cast<int64_t>(length) <= self->opt_.max_state_bytes)) {
      in.rndv_desc = data;
      ret = UCS_INPROGRESS;  // fetched from tick() with ucp_am_recv_data_nbx
    } else {
      ret = UCS_ERR_MESSAGE_TRUNCATED;  // refused: the sender's send completes with this
    }
  } else if (length > 0) {
    const auto* d = static_cast<const uint8_t*>(data);
    in.data.assign(d, d + length);
  }
  self->inbox_.push_back(std::move(in));
  return ret;
}

void UcxKvReceiver::on_rows_data(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* rr = static_cast<RowsRecv*>(user_data);
  rr->self->rows_done_.emplace_back(rr, status);
  ucp_request_free(request);
}

void UcxKvReceiver::on_conn_request(ucp_conn_request_h req, void* arg) {
  static_cast<UcxKvReceiver*>(arg)->conn_requests_.push_back(req);
}

void UcxKvReceiver::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<UcxKvReceiver*>(arg)->ep_errors_.emplace_back(ep, status);
}

void UcxKvReceiver::on_state_data(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* sr = static_cast<StateRecv*>(user_data);
  sr->self->state_done_.emplace_back(sr, status);
  ucp_request_free(request);
}

// ---- progress-thread work ----------------------------------------------------------------

bool UcxKvReceiver::tick() {
  const bool work =
      !conn_requests_.empty() || !inbox_.empty() || !state_done_.empty() || !rows_done_.empty() || !ep_errors_.empty();
  for (auto* req : std::exchange(conn_requests_, {})) accept(req);
  auto inbox = std::exchange(inbox_, {});
  for (auto& in : inbox) handle(in);
  for (auto& [rr, st] : std::exchange(rows_done_, {})) {
    rows_arrived(rr->msg, st);
    delete rr;
  }
  for (auto& [sr, st] : std::exchange(state_done_, {})) {
    state_arrived(sr->reservation_id, sr->msg, std::move(sr->buf), st);
    delete sr;
  }
  expire_leases();
  flush_acks();
  // After the messages: an endpoint's last messages are handled before its failure.
  for (auto& [ep, st] : std::exchange(ep_errors_, {})) drop_connection(ep, st);
  reap_requests(closing_);
  return work;
}

void UcxKvReceiver::accept(ucp_conn_request_h req) {
  if (static_cast<int>(conns_.size()) >= opt_.max_connections) {
    ucp_listener_reject(listener_, req);
    YOCO_LOG(LogLevel::kWarn, "kv receiver: connection refused", LogFields().kv("connections", conns_.size()));
    return;
  }
  ucp_ep_params_t ep{};
  ep.field_mask =
      UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.conn_request = req;
  ep.err_mode = opt_.peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = this;
  ucp_ep_h h = nullptr;
  const ucs_status_t st = ucp_ep_create(ucx_->worker(), &ep, &h);
  if (st != UCS_OK) {
    YOCO_LOG(LogLevel::kWarn, "kv receiver: accept failed", LogFields().kv("status", ucs_status_string(st)));
    return;
  }
  conns_[h] = next_conn_++;
}

uint64_t UcxKvReceiver::conn_of(ucp_ep_h ep) const {
  auto it = conns_.find(ep);
  return it == conns_.end() ? 0 : it->second;
}

void UcxKvReceiver::close_ep(ucp_ep_h ep) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
}

void UcxKvReceiver::drop_connection(ucp_ep_h ep, ucs_status_t status) {
  auto it = conns_.find(ep);
  if (it == conns_.end()) return;
  const uint64_t conn = it->second;
  conns_.erase(it);
  close_ep(ep);
  std::lock_guard<std::mutex> lock(mu_);
  int failed = 0;
  for (auto& [id, r] : reservations_) {
    if (r.phase != Phase::kOpen) continue;
    if (std::find(r.writers.begin(), r.writers.end(), conn) == r.writers.end()) continue;
    fail_locked(r, TransferError::kPeerFailed, std::string("sender endpoint failed: ") + ucs_status_string(status));
    ++failed;
  }
  YOCO_LOG(failed ? LogLevel::kWarn : LogLevel::kDebug, "kv receiver: connection closed",
           LogFields().kv("status", ucs_status_string(status)).kv("failed_reservations", failed));
}

void UcxKvReceiver::handle(Inbound& in) {
  const uint64_t conn = conn_of(in.reply_ep);
  switch (in.id) {
    case kAmBegin: {
      auto m = decode_begin(in.header);
      if (!m.ok()) return;  // nothing to bind; the commit will be checked on its own
      std::lock_guard<std::mutex> lock(mu_);
      auto it = reservations_.find(m->reservation_id);
      if (it == reservations_.end() || it->second.phase != Phase::kOpen) return;
      Reservation& r = it->second;
      if (!authorized_locked(r, m->secret)) return;
      if (r.writers.empty()) r.started = Clock::now();  // transfer time runs from the first write
      if (conn && std::find(r.writers.begin(), r.writers.end(), conn) == r.writers.end()) r.writers.push_back(conn);
      if (m->fingerprint != fingerprint_)
        fail_locked(r, TransferError::kFingerprintMismatch,
                    "sender model " + std::to_string(m->fingerprint) + " != " + std::to_string(fingerprint_));
      return;
    }
    case kAmState:
      handle_state(in, conn);
      return;
    case kAmRows:
      handle_rows(in);
      return;
    case kAmCommit: {
      auto m = decode_commit(in.header);
      std::lock_guard<std::mutex> lock(mu_);
      if (!m.ok()) {
        // Unreadable, so unauthenticated: answered, but the reservation it names stays as it is.
        const uint64_t id = peek_reservation_id(in.header);
        send_ack(in.reply_ep, id, m.status());
        return;
      }
      process_commit_locked(*m, in.reply_ep);
      return;
    }
    case kAmAbort: {
      auto m = decode_abort(in.header);
      if (!m.ok()) return;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = reservations_.find(m->reservation_id);
      if (it == reservations_.end() || it->second.phase != Phase::kOpen) return;
      if (!authorized_locked(it->second, m->secret)) return;
      const TransferError e = m->reason == TransferError::kNone ? TransferError::kAborted : m->reason;
      fail_locked(it->second, e, "sender aborted: " + m->message);
      return;
    }
    default:
      return;
  }
}

void UcxKvReceiver::handle_state(Inbound& in, uint64_t conn) {
  auto m = decode_state(in.header);
  std::unique_lock<std::mutex> lock(mu_);
  Reservation* r = nullptr;
  if (m.ok()) {
    auto it = reservations_.find(m->reservation_id);
    if (it != reservations_.end() && it->second.phase == Phase::kOpen && authorized_locked(it->second, m->secret))
      r = &it->second;
  }
  auto refuse_rndv = [&] {
    if (!in.rndv_desc) return;
    ucp_am_data_release(ucx_->worker(), in.rndv_desc);
  };
  if (r == nullptr) {
    refuse_rndv();
    return;
  }
  if (conn && std::find(r->writers.begin(), r->writers.end(), conn) == r->writers.end()) r->writers.push_back(conn);
  if (r->has_state || r->state_pending) {
    refuse_rndv();
    fail_locked(*r, TransferError::kInvalid, "second state blob");
    return;
  }
  if (static_cast<int64_t>(in.length) > opt_.max_state_bytes || m->bytes != in.length) {
    refuse_rndv();
    fail_locked(*r, in.length != m->bytes ? TransferError::kBadChecksum : TransferError::kStateTooLarge,
                "state blob of " + std::to_string(in.length) + " bytes (announced " + std::to_string(m->bytes) +
                    ", limit " + std::to_string(opt_.max_state_bytes) + ")");
    return;
  }
  if (!in.rndv_desc) {
    lock.unlock();
    state_arrived(m->reservation_id, *m, std::move(in.data), UCS_OK);
    return;
  }
  r->state_pending = true;
  lock.unlock();
  auto* sr = new StateRecv{this, m->reservation_id, *m, std::vector<uint8_t>(in.length)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = on_state_data;
  p.user_data = sr;
  ucs_status_ptr_t ret = ucp_am_recv_data_nbx(ucx_->worker(), in.rndv_desc, sr->buf.data(), in.length, &p);
  if (!UCS_PTR_IS_PTR(ret)) {
    state_arrived(sr->reservation_id, sr->msg, std::move(sr->buf), UCS_PTR_STATUS(ret));
    delete sr;
  }
}

float* UcxKvReceiver::rows_destination_locked(Reservation& r, const RowsMsg& m, size_t length) {
  const int64_t bs = pool_.block_size();
  const bool fits = m.row >= r.resident_rows && m.rows > 0 && m.row + m.rows <= r.rows &&
                    static_cast<uint64_t>(length) == static_cast<uint64_t>(m.rows) * pool_.row_floats() * 4;
  bool contiguous = fits;
  for (int64_t b = m.row / bs + 1; contiguous && b <= (m.row + m.rows - 1) / bs; ++b)
    contiguous = r.blocks[b] == r.blocks[b - 1] + 1;
  if (!contiguous) {
    metrics_.count_refused(TransferRefusal::kOutOfRange);
    fail_locked(r, TransferError::kInvalid,
                "rows message [" + std::to_string(m.row) + ", +" + std::to_string(m.rows) + ") of " +
                    std::to_string(length) + " bytes does not fit the reservation");
    return nullptr;
  }
  if (r.arrived.empty()) {
    r.arrived.assign(r.rows, 0);
    std::fill(r.arrived.begin(), r.arrived.begin() + r.resident_rows, uint8_t{3});
  }
  return (m.which ? pool_.v_base() : pool_.k_base()) + pool_.row_offset(r.blocks, m.row);
}

void UcxKvReceiver::handle_rows(Inbound& in) {
  auto m = decode_rows(in.header);
  float* dst = nullptr;
  if (m.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reservations_.find(m->reservation_id);
    if (it != reservations_.end() && it->second.phase == Phase::kOpen && authorized_locked(it->second, m->secret)) {
      dst = rows_destination_locked(it->second, *m, in.length);
      if (dst) ++it->second.pending_rows;
    }
  }
  if (dst == nullptr) {  // dropped: the sender's send completes, its commit gets the reason
    ucp_am_data_release(ucx_->worker(), in.rndv_desc);
    return;
  }
  auto* rr = new RowsRecv{this, *m};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = on_rows_data;
  p.user_data = rr;
  ucs_status_ptr_t ret = ucp_am_recv_data_nbx(ucx_->worker(), in.rndv_desc, dst, in.length, &p);
  if (!UCS_PTR_IS_PTR(ret)) {
    rows_arrived(rr->msg, UCS_PTR_STATUS(ret));
    delete rr;
  }
}

void UcxKvReceiver::rows_arrived(const RowsMsg& m, ucs_status_t status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto d = draining_.find(m.reservation_id); d != draining_.end()) {
    if (--d->second.pending == 0) {
      pool_.release_blocks(d->second.blocks);
      draining_.erase(d);
    }
    return;
  }
  auto it = reservations_.find(m.reservation_id);
  if (it == reservations_.end() || it->second.phase != Phase::kOpen) return;
  Reservation& r = it->second;
  --r.pending_rows;
  if (r.phase == Phase::kOpen) {
    if (status != UCS_OK) {
      fail_locked(r, TransferError::kPeerFailed, std::string("rows receive failed: ") + ucs_status_string(status));
    } else {
      for (int64_t row = m.row; row < m.row + m.rows; ++row) r.arrived[row] |= static_cast<uint8_t>(1 << m.which);
    }
  }
  if (r.pending_rows > 0) return;
  if (r.phase == Phase::kOpen && r.deferred_commit && !r.state_pending) {
    auto [dm, ep] = std::move(*r.deferred_commit);
    r.deferred_commit.reset();
    process_commit_locked(dm, ep);
  }
}

void UcxKvReceiver::state_arrived(uint64_t reservation_id, const StateMsg& msg, std::vector<uint8_t> blob,
                                  ucs_status_t status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end() || it->second.phase != Phase::kOpen) return;
  Reservation& r = it->second;
  r.state_pending = false;
  if (status != UCS_OK) {
    fail_locked(r, TransferError::kPeerFailed, std::string("state blob receive failed: ") + ucs_status_string(status));
    return;
  }
  if (blob.size() != msg.bytes || crc32c(blob.data(), blob.size()) != msg.blob_crc) {
    fail_locked(r, TransferError::kBadChecksum, "state blob checksum mismatch");
    return;
  }
  r.state_blob = std::move(blob);
  r.has_state = true;
  if (r.deferred_commit && r.pending_rows == 0) {
    auto [m, ep] = std::move(*r.deferred_commit);
    r.deferred_commit.reset();
    process_commit_locked(m, ep);
  }
}

std::vector<uint32_t> UcxKvReceiver::pool_row_crcs(const Reservation& r) const {
  // The sender's checksum covers the rows it put: those past the resident ones. Read from the
  // pool after everything landed (a write between landing and commit is caught too), on up to
  // verify_threads threads: nothing else overlaps this pass (bench/README.md, transfer at memcpy speed).
  std::vector<uint32_t> crcs(r.rows - r.resident_rows);
  const int kv_dim = pool_.row_floats();
  auto range = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t off = pool_.row_offset(r.blocks, row);
      crcs[row - r.resident_rows] = row_crc(pool_.k_base() + off, pool_.v_base() + off, kv_dim);
    }
  };
  const int64_t bytes = static_cast<int64_t>(crcs.size()) * kv_dim * 8;
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

void UcxKvReceiver::process_commit_locked(const CommitMsg& m, ucp_ep_h reply_ep) {
  auto it = reservations_.find(m.reservation_id);
  if (it == reservations_.end()) {  // never made, or committed and handed over: a replay at best
    metrics_.count_refused(TransferRefusal::kReplay);
    send_ack(reply_ep, m.reservation_id,
             transfer_error(TransferError::kUnknownReservation, "reservation " + std::to_string(m.reservation_id)));
    return;
  }
  Reservation& r = it->second;
  if (!authorized_locked(r, m.secret)) {
    send_ack(reply_ep, m.reservation_id,
             transfer_error(TransferError::kInvalid, "commit without the reservation's secret: refused"));
    return;
  }
  if (r.phase == Phase::kFailed) {
    send_ack(reply_ep, m.reservation_id, r.failure);
    return;
  }
  if (r.phase == Phase::kCommitted) {
    metrics_.count_refused(TransferRefusal::kReplay);
    send_ack(reply_ep, m.reservation_id,
             transfer_error(TransferError::kAlreadyCommitted, "reservation " + std::to_string(r.id)));
    return;
  }
  auto reject = [&](TransferError e, const std::string& detail) {
    fail_locked(r, e, detail);
    send_ack(reply_ep, m.reservation_id, r.failure);
  };
  if (m.fingerprint != fingerprint_)
    return reject(TransferError::kFingerprintMismatch,
                  "sender model " + std::to_string(m.fingerprint) + " != " + std::to_string(fingerprint_));
  if (m.request_id != r.request_id)
    return reject(TransferError::kRequestMismatch, "commit for request '" + m.request_id + "'");
  if (m.rows_written != r.rows)
    return reject(TransferError::kRowCountMismatch,
                  std::to_string(m.rows_written) + " rows written, " + std::to_string(r.rows) + " reserved");
  if (r.state_pending || r.pending_rows > 0 || (!r.has_state && m.state_bytes > 0)) {
    // Rows or the state are still on the wire (or overtaken by the commit on another lane):
    // finish when they land, or fail with the lease.
    r.deferred_commit.emplace(m, reply_ep);
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
  if (Status fits = check_state_blob_model(h, fingerprint_, opt_.state_shape); !fits.ok())
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
  metrics_.observe_transfer((r.rows - r.resident_rows) * pool_.row_floats() * 8 + static_cast<int64_t>(m.state_bytes),
                            secs);
  send_ack(reply_ep, m.reservation_id, Status::Ok());
  // The acknowledgement leaves before the decode side wakes up and takes the core.
  flush_acks();
  cv_.notify_all();
}

bool UcxKvReceiver::authorized_locked(const Reservation& r, const ReservationSecret& secret) {
  if (secret_equal(r.secret, secret)) return true;
  metrics_.count_refused(TransferRefusal::kBadSecret);
  return false;
}

void UcxKvReceiver::fail_locked(Reservation& r, TransferError e, const std::string& detail) {
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
  if (r.deferred_commit && ucx_->on_progress_thread()) send_ack(r.deferred_commit->second, r.id, r.failure);
  r.deferred_commit.reset();
  metrics_.add_in_flight(-1);
  metrics_.count_failure();
  tombstones_.push_back(r.id);
  while (tombstones_.size() > std::max<size_t>(1, opt_.max_tombstones)) {
    auto it = reservations_.find(tombstones_.front());
    if (it != reservations_.end() && it->second.phase == Phase::kFailed) reservations_.erase(it);
    tombstones_.pop_front();
  }
  YOCO_LOG(LogLevel::kInfo, "kv reservation failed",
           LogFields()
               .kv("reservation", r.id)
               .kv("request", r.request_id)
               .kv("reason", transfer_error_name(e))
               .kv("detail", detail));
  cv_.notify_all();
}

void UcxKvReceiver::send_ack(ucp_ep_h ep, uint64_t reservation_id, const Status& st) {
  if (ep != nullptr) acks_out_.push_back({ep, reservation_id, st});
}

void UcxKvReceiver::flush_acks() {
  for (auto& a : std::exchange(acks_out_, {})) {
    if (conns_.find(a.ep) == conns_.end()) continue;  // gone: the sender's wait ends by its deadline
    auto* op = new UcxOp;
    op->header = encode(AckMsg{a.reservation_id, a.status.ok() ? TransferError::kNone : transfer_error_of(a.status),
                               a.status.message()});
    op->on_done = [](ucs_status_t) {};
    ucp_request_param_t p;
    ucx_op_param(p, op);
    ucx_op_posted(ucp_am_send_nbx(a.ep, kAmAck, op->header.data(), op->header.size(), nullptr, 0, &p), op);
  }
}

void UcxKvReceiver::expire_leases() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (now < next_expiry_) return;
  auto next = Clock::time_point::max();
  for (auto& [id, r] : reservations_) {
    if (r.phase != Phase::kOpen) continue;
    if (r.deadline <= now) {
      fail_locked(r, TransferError::kLeaseExpired, "lease expired before a valid commit");
    } else {
      next = std::min(next, r.deadline);
    }
  }
  next_expiry_ = next;
}

// ---- API ---------------------------------------------------------------------------------

Result<ReservationDescriptor> UcxKvReceiver::reserve_over(const std::string& request_id, int64_t rows,
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
  d.fingerprint = fingerprint_;
  d.kv_dim = pool_.row_floats();
  d.block_size = pool_.block_size();
  d.pool_blocks = pool_.total_blocks();
  d.rows = rows;
  d.blocks = blocks;
  d.address = address_;
  d.k_base = reinterpret_cast<uint64_t>(pool_.k_base());
  d.v_base = reinterpret_cast<uint64_t>(pool_.v_base());
  d.k_rkey = k_rkey_;
  d.v_rkey = v_rkey_;
  d.lease_deadline_unix_ms = unix_ms(lease_deadline);
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
  return d;
}

Result<CommittedSequence> UcxKvReceiver::wait_committed(uint64_t reservation_id, Clock::time_point deadline) {
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

void UcxKvReceiver::cancel(uint64_t reservation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return;
  Reservation& r = it->second;
  if (r.phase == Phase::kOpen) {
    fail_locked(r, TransferError::kCancelled, "cancelled by the decode side");
  } else if (r.phase == Phase::kCommitted) {
    pool_.release_blocks(r.blocks);
    reservations_.erase(it);
  } else {
    reservations_.erase(it);
  }
}

}  // namespace

Result<std::unique_ptr<KvReceiver>> make_ucx_receiver(KvBlockPool& pool, const UcxReceiverOptions& options) {
  auto r = std::make_unique<UcxKvReceiver>(pool, options);
  YOCO_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<KvReceiver>(std::move(r));
}

}  // namespace yoco
