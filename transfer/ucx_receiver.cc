// Decode side of the UCX transfer engine: the wiring only. Pool registration, the listener,
// connections, fetching rows and state blobs, sending acknowledgements; the reservations,
// their leases and the commit verdicts are the ReservationTable's (transfer/reservations.h).
// UCX callbacks only queue what arrived; the progress thread's tick hands it to the table.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <unordered_map>

#include "common/log.h"
#include "transfer/messages.h"
#include "transfer/reservations.h"
#include "transfer/ucx_transport.h"
#include "transfer/ucx_worker.h"

namespace yoco {

using namespace transfer_detail;

namespace {

using Clock = TransferClock;

ReservationTableOptions table_options(const UcxReceiverOptions& o) {
  ReservationTableOptions t;
  t.fingerprint = o.fingerprint;
  t.state_shape = o.state_shape;
  t.max_rows = o.max_rows;
  t.max_state_bytes = o.max_state_bytes;
  t.verify_rows = o.verify_rows;
  t.verify_threads = o.verify_threads;
  t.verify_bytes_per_thread = o.verify_bytes_per_thread;
  t.max_tombstones = o.max_tombstones;
  return t;
}

ReplyTo reply_to(ucp_ep_h ep) { return reinterpret_cast<ReplyTo>(ep); }
ucp_ep_h ep_of(ReplyTo to) { return reinterpret_cast<ucp_ep_h>(to); }

class UcxKvReceiver final : public KvReceiver {
 public:
  UcxKvReceiver(KvBlockPool& pool, const UcxReceiverOptions& opt)
      : pool_(pool), opt_(opt), table_(pool, table_options(opt)) {}
  ~UcxKvReceiver() override;

  Status init();

  const std::string& address() const override { return address_; }
  Result<ReservationDescriptor> reserve(const std::string& request_id, int64_t rows,
                                        Clock::time_point lease_deadline) override {
    return reserve_over(request_id, rows, lease_deadline, {});
  }
  Result<ReservationDescriptor> reserve_over(const std::string& request_id, int64_t rows,
                                             Clock::time_point lease_deadline, std::vector<int32_t> resident) override {
    return table_.reserve(request_id, rows, lease_deadline, std::move(resident));
  }
  Result<CommittedSequence> wait_committed(uint64_t reservation_id, Clock::time_point deadline) override {
    return table_.wait_committed(reservation_id, deadline);
  }
  void cancel(uint64_t reservation_id) override { table_.cancel(reservation_id); }
  int64_t in_flight() const override { return table_.metrics().snapshot().in_flight; }
  const TransferMetrics& metrics() const override { return table_.metrics(); }

 private:
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
  // Queues the acknowledgement; tick() sends it (never from inside a UCX callback).
  void send_ack(ucp_ep_h ep, uint64_t reservation_id, const Status& st);
  void queue_acks(Acks acks);
  void flush_acks();
  void close_ep(ucp_ep_h ep);
  uint64_t conn_of(ucp_ep_h ep) const;
  void teardown();

  KvBlockPool& pool_;
  const UcxReceiverOptions opt_;
  std::unique_ptr<UcxWorker> ucx_;
  ucp_listener_h listener_ = nullptr;
  ucp_mem_h k_memh_ = nullptr, v_memh_ = nullptr;
  std::string address_;
  ReservationTable table_;

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

Status UcxKvReceiver::init() {
  if (static_cast<uint32_t>(pool_.row_floats()) != opt_.state_shape.kv_dim)
    return invalid_argument("kv receiver: pool kv_dim " + std::to_string(pool_.row_floats()) + " != model kv_dim " +
                            std::to_string(opt_.state_shape.kv_dim));
  if (opt_.max_rows <= 0) return invalid_argument("kv receiver: max_rows must be > 0");
  YOCO_ASSIGN_OR_RETURN(ucx_, UcxWorker::create(opt_.transports, "yoco-kv-receiver", opt_.allow_push));
  std::vector<uint8_t> k_rkey, v_rkey;

  // Register the pool once (pulled rows are received straight into it); senders write into it
  // with the packed keys only when pushes are allowed.
  for (int which = 0; which < 2; ++which) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = which == 0 ? pool_.k_bytes() : pool_.v_bytes();
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
    (which == 0 ? k_rkey : v_rkey).assign(b, b + size);
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
  table_.set_endpoint(address_, std::move(k_rkey), std::move(v_rkey));

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
  table_.shutdown();  // the worker no longer progresses
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
  ucx_->finish_closing(closing_, "kv receiver");
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
    if (m.ok()) self->queue_acks(self->table_.rows_landed(*m, data, length));
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
    queue_acks(table_.rows_arrived(rr->msg, st == UCS_OK ? "" : ucs_status_string(st)));
    delete rr;
  }
  for (auto& [sr, st] : std::exchange(state_done_, {})) {
    queue_acks(table_.state_arrived(sr->msg, std::move(sr->buf), st == UCS_OK ? "" : ucs_status_string(st)));
    delete sr;
  }
  queue_acks(table_.expire(Clock::now()));
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
  int failed = 0;
  queue_acks(table_.connection_failed(conn, ucs_status_string(status), &failed));
  YOCO_LOG(failed ? LogLevel::kWarn : LogLevel::kDebug, "kv receiver: connection closed",
           LogFields().kv("status", ucs_status_string(status)).kv("failed_reservations", failed));
}

void UcxKvReceiver::handle(Inbound& in) {
  const uint64_t conn = conn_of(in.reply_ep);
  switch (in.id) {
    case kAmBegin: {
      auto m = decode_begin(in.header);
      if (!m.ok()) return;  // nothing to bind; the commit will be checked on its own
      queue_acks(table_.begin(*m, conn));
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
      if (!m.ok()) {
        // Unreadable, so unauthenticated: answered, but the reservation it names stays as it is.
        send_ack(in.reply_ep, peek_reservation_id(in.header), m.status());
        return;
      }
      Acks acks = table_.commit(*m, reply_to(in.reply_ep));
      const bool admitted = std::any_of(acks.begin(), acks.end(), [](const Ack& a) { return a.status.ok(); });
      queue_acks(std::move(acks));
      // An admission's acknowledgement leaves at once, before the decode side takes the core.
      if (admitted) flush_acks();
      return;
    }
    case kAmAbort: {
      auto m = decode_abort(in.header);
      if (!m.ok()) return;
      queue_acks(table_.abort(*m));
      return;
    }
    default:
      return;
  }
}

void UcxKvReceiver::handle_state(Inbound& in, uint64_t conn) {
  auto m = decode_state(in.header);
  Acks acks;
  const auto admission = m.ok() ? table_.state_announced(*m, in.length, in.rndv_desc == nullptr, conn, acks)
                                : ReservationTable::StateAdmission::kRefused;
  queue_acks(std::move(acks));
  if (admission == ReservationTable::StateAdmission::kRefused) {
    if (in.rndv_desc) ucp_am_data_release(ucx_->worker(), in.rndv_desc);
    return;
  }
  if (admission == ReservationTable::StateAdmission::kInline) {
    queue_acks(table_.state_arrived(*m, std::move(in.data), ""));
    return;
  }
  auto* sr = new StateRecv{this, m->reservation_id, *m, std::vector<uint8_t>(in.length)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = on_state_data;
  p.user_data = sr;
  ucs_status_ptr_t ret = ucp_am_recv_data_nbx(ucx_->worker(), in.rndv_desc, sr->buf.data(), in.length, &p);
  if (!UCS_PTR_IS_PTR(ret)) {
    const ucs_status_t st = UCS_PTR_STATUS(ret);
    queue_acks(table_.state_arrived(sr->msg, std::move(sr->buf), st == UCS_OK ? "" : ucs_status_string(st)));
    delete sr;
  }
}

void UcxKvReceiver::handle_rows(Inbound& in) {
  auto m = decode_rows(in.header);
  uint8_t* dst = nullptr;
  if (m.ok()) {
    Acks acks;
    dst = table_.rows_landing(*m, in.length, acks);
    queue_acks(std::move(acks));
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
    const ucs_status_t st = UCS_PTR_STATUS(ret);
    queue_acks(table_.rows_arrived(rr->msg, st == UCS_OK ? "" : ucs_status_string(st)));
    delete rr;
  }
}

void UcxKvReceiver::send_ack(ucp_ep_h ep, uint64_t reservation_id, const Status& st) {
  if (ep != nullptr) acks_out_.push_back({ep, reservation_id, st});
}

void UcxKvReceiver::queue_acks(Acks acks) {
  for (Ack& a : acks) send_ack(ep_of(a.to), a.reservation_id, a.status);
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

}  // namespace

Result<std::unique_ptr<KvReceiver>> make_ucx_receiver(KvBlockPool& pool, const UcxReceiverOptions& options) {
  auto r = std::make_unique<UcxKvReceiver>(pool, options);
  YOCO_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<KvReceiver>(std::move(r));
}

}  // namespace yoco
